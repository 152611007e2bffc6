"""Per-tenant authorisation in front of the Kafka ACL authorizer.

A tenant may name the principals allowed to use its topics (`allowed_principals`, e.g.
["User:alice"], set with `ledgerwire admin tenants create NAME --allowed-principal User:alice`).
A principal outside that list is refused every operation on the tenant's topics before the ACLs
are asked; super users pass.  A tenant with an empty list leaves everything to the ACLs.  The
principals are the SASL ones the Kafka listener authenticated (gateway/security/credentials.py).

Everything else (the `acls` store the ACL APIs use, `enabled`, `super_users`) is the wrapped
authorizer's, reached through attribute delegation.

This module must never grant what the wrapped authorizer refuses: it can only refuse more.
"""

from __future__ import annotations

import logging
from typing import Any

from protocols.kafka.acl_model import RES_TOPIC

log = logging.getLogger("ledgerwire.tenants")


class TenantAuthorizer:
    def __init__(self, inner: Any, namespaces: Any) -> None:
        self._inner = inner
        self._namespaces = namespaces

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        inner_enabled = getattr(self._inner, "enabled", True)
        super_users: frozenset[str] = getattr(self._inner, "super_users", frozenset())
        if (inner_enabled and resource_type == RES_TOPIC and principal not in super_users
                and not self._namespaces.principal_allowed(name, principal)):
            log.debug("tenant refused", extra={"principal": principal, "topic": name})
            return False
        return bool(self._inner.authorize(principal, host, operation, resource_type, name))
