"""Kafka ACLs as data: bindings, filters, and the allow/deny decision (Kafka's AclAuthorizer rules).

An ACL binding says: principal P from host H is ALLOWed (or DENYed) operation O on a resource
pattern (resource type, name, LITERAL or PREFIXED).  The decision for one request:

1. super users are allowed everything;
2. the ACLs whose pattern matches the resource (LITERAL name equal, LITERAL "*", or PREFIXED
   name a prefix of it) and whose principal and host match (or are "User:*" / "*") count;
3. any matching DENY for the operation (or ALL) denies;
4. a matching ALLOW for the operation, ALL, or an operation that implies it (READ, WRITE,
   DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. with no ACL at all on the resource, `allow_if_no_acl` decides; otherwise deny.

Codes are Kafka's (AclOperation, ResourceType, PatternType, AclPermissionType).  Filters use
ANY (1) as a wildcard and MATCH (pattern type 2) to mean "every pattern that would match this
name", as DescribeAcls/DeleteAcls define.

This module must never do I/O: the store (gateway/security/acl_store.py) persists bindings and asks
`decide` here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# AclOperation
OP_UNKNOWN, OP_ANY, OP_ALL, OP_READ, OP_WRITE, OP_CREATE, OP_DELETE = 0, 1, 2, 3, 4, 5, 6
OP_ALTER, OP_DESCRIBE, OP_CLUSTER_ACTION, OP_DESCRIBE_CONFIGS = 7, 8, 9, 10
OP_ALTER_CONFIGS, OP_IDEMPOTENT_WRITE, OP_CREATE_TOKENS, OP_DESCRIBE_TOKENS = 11, 12, 13, 14
# ResourceType
RES_UNKNOWN, RES_ANY, RES_TOPIC, RES_GROUP, RES_CLUSTER = 0, 1, 2, 3, 4
RES_TRANSACTIONAL_ID, RES_DELEGATION_TOKEN, RES_USER = 5, 6, 7
# PatternType
PAT_UNKNOWN, PAT_ANY, PAT_MATCH, PAT_LITERAL, PAT_PREFIXED = 0, 1, 2, 3, 4
# AclPermissionType
PERM_UNKNOWN, PERM_ANY, PERM_DENY, PERM_ALLOW = 0, 1, 2, 3

CLUSTER_NAME = "kafka-cluster"
WILDCARD_NAME = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
ANONYMOUS = "User:ANONYMOUS"

_CONCRETE_OPERATIONS = frozenset(range(OP_ALL, OP_DESCRIBE_TOKENS + 1))
_CONCRETE_RESOURCES = frozenset(range(RES_TOPIC, RES_USER + 1))
_IMPLIED_BY: dict[int, frozenset[int]] = {
    OP_DESCRIBE: frozenset({OP_DESCRIBE, OP_READ, OP_WRITE, OP_DELETE, OP_ALTER}),
    OP_DESCRIBE_CONFIGS: frozenset({OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS}),
}


class AclError(ValueError):
    """A binding or filter that Kafka would refuse (INVALID_REQUEST on the wire)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def validate(self) -> None:
        if self.resource_type not in _CONCRETE_RESOURCES:
            raise AclError(f"invalid resource type {self.resource_type}")
        if self.pattern_type not in (PAT_LITERAL, PAT_PREFIXED):
            raise AclError(f"invalid pattern type {self.pattern_type}")
        if self.operation not in _CONCRETE_OPERATIONS:
            raise AclError(f"invalid operation {self.operation}")
        if self.permission not in (PERM_ALLOW, PERM_DENY):
            raise AclError(f"invalid permission type {self.permission}")
        if not self.resource_name:
            raise AclError("empty resource name")
        if self.resource_type == RES_CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        kind, sep, _name = self.principal.partition(":")
        if not sep or not kind:
            raise AclError(f"principal {self.principal!r} is not of the form Type:name")

    def as_list(self) -> list[object]:
        return [self.resource_type, self.resource_name, self.pattern_type, self.principal,
                self.host, self.operation, self.permission]

    @classmethod
    def from_list(cls, row: list[object]) -> AclBinding:
        rt, name, pt, principal, host, op, perm = row
        return cls(int(rt), str(name), int(pt), str(principal), str(host), int(op),  # type: ignore[call-overload]
                   int(perm))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class AclFilter:
    """None for a string field, ANY for a code field: matches everything."""

    resource_type: int = RES_ANY
    resource_name: str | None = None
    pattern_type: int = PAT_ANY
    principal: str | None = None
    host: str | None = None
    operation: int = OP_ANY
    permission: int = PERM_ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != RES_ANY and self.resource_type != acl.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != OP_ANY and self.operation != acl.operation:
            return False
        return self.permission == PERM_ANY or self.permission == acl.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern_type == PAT_MATCH:
            if self.resource_name is None:
                return True
            return _pattern_covers(acl, self.resource_name)
        if self.pattern_type != PAT_ANY and self.pattern_type != acl.pattern_type:
            return False
        return self.resource_name is None or self.resource_name == acl.resource_name

    def validate(self) -> None:
        if self.resource_type == RES_UNKNOWN or self.pattern_type == PAT_UNKNOWN:
            raise AclError("filter with an UNKNOWN resource or pattern type")
        if self.operation == OP_UNKNOWN or self.permission == PERM_UNKNOWN:
            raise AclError("filter with an UNKNOWN operation or permission type")


def _pattern_covers(acl: AclBinding, name: str) -> bool:
    if acl.pattern_type == PAT_LITERAL:
        return acl.resource_name == name or acl.resource_name == WILDCARD_NAME
    if acl.pattern_type == PAT_PREFIXED:
        return name.startswith(acl.resource_name)
    return False


def decide(
    acls: Iterable[AclBinding], principal: str, host: str, operation: int, resource_type: int,
    name: str, *, allow_if_no_acl: bool,
) -> bool:
    """May `principal` from `host` do `operation` on (resource_type, name)?  See module doc."""
    any_on_resource = False
    allowed = False
    allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
    for acl in acls:
        if acl.resource_type != resource_type or not _pattern_covers(acl, name):
            continue
        any_on_resource = True
        if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
            continue
        if acl.host != host and acl.host != WILDCARD_HOST:
            continue
        if acl.permission == PERM_DENY and acl.operation in (operation, OP_ALL):
            return False
        if acl.permission == PERM_ALLOW and (acl.operation == OP_ALL or acl.operation in allowing):
            allowed = True
    if allowed:
        return True
    return allow_if_no_acl and not any_on_resource


def decide_by_type(acls: Iterable[AclBinding], principal: str, host: str, operation: int,
                   resource_type: int, *, allow_if_no_acl: bool) -> bool:
    """May `principal` do `operation` on SOME resource of `resource_type` (Kafka's
    authorizeByResourceType, e.g. WRITE on any topic for an idempotent producer id)?

    A DENY on the wildcard name refuses everything; otherwise allow_if_no_acl allows (Kafka's
    AclAuthorizer does the same), else an ALLOW binding must name a resource no DENY of this
    principal covers (a DENY on the same name, or a prefixed DENY that is a prefix of it).
    """
    allowing = _IMPLIED_BY.get(operation, frozenset({operation}))

    def mine(acl: AclBinding) -> bool:
        return (acl.resource_type == resource_type
                and acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD_HOST))

    of_type = [acl for acl in acls if acl.resource_type == resource_type]
    denies = [acl for acl in of_type if mine(acl) and acl.permission == PERM_DENY
              and acl.operation in (operation, OP_ALL)]
    if any(d.pattern_type == PAT_LITERAL and d.resource_name == WILDCARD_NAME for d in denies):
        return False
    if allow_if_no_acl:  # as Kafka's AclAuthorizer: allowed unless every resource is denied
        return True

    def denied(name: str) -> bool:
        return any(d.resource_name == name or (d.pattern_type == PAT_PREFIXED
                                               and name.startswith(d.resource_name))
                   for d in denies)

    for acl in of_type:
        if (mine(acl) and acl.permission == PERM_ALLOW
                and (acl.operation == OP_ALL or acl.operation in allowing)
                and not denied(acl.resource_name)):
            return True
    return False
