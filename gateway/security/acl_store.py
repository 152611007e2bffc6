"""Kafka ACLs in the metadata store, and the authorizer that enforces them.

All bindings live in one node, /ledgerwire/acls, as JSON {"format": 1, "acls": [[type, name,
pattern, principal, host, operation, permission], ...]}, changed only by compare-and-set on its
version (retrying on a concurrent change).  One node keeps every change atomic and a broker's
view is one read; ACL sets are small (a node holds thousands of bindings).  Each broker keeps
the decoded list in memory, so authorising a request does no I/O; `run()` watches the node and
reloads when another broker (or the CLI) changes it.

`Authorizer` is what the broker asks, per request item: super users pass, otherwise
`protocols.kafka.acl_model.decide` applies Kafka's rules over the cached bindings.  When
authorisation is disabled it allows everything (ACLs are still stored and listed).

This module must never write the ACL node without a version check, or do I/O in `authorize`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from protocols.kafka.acl_model import (
    PAT_PREFIXED,
    WILDCARD_NAME,
    AclBinding,
    AclFilter,
    decide,
    decide_by_type,
)

log = logging.getLogger("ledgerwire.acls")

ACLS_PATH = "/ledgerwire/acls"
ACLS_FORMAT_VERSION = 1
_CAS_ATTEMPTS = 20


def _encode(acls: Sequence[AclBinding]) -> bytes:
    return json.dumps({"format": ACLS_FORMAT_VERSION,
                       "acls": [a.as_list() for a in acls]}).encode()


def _decode(data: bytes) -> list[AclBinding]:
    if not data:
        return []
    doc = json.loads(data)
    if doc.get("format") != ACLS_FORMAT_VERSION:
        raise ValueError(f"ACL node: unknown format {doc.get('format')}")
    return [AclBinding.from_list(row) for row in doc.get("acls", [])]


class AclStore:
    """The cluster's ACL bindings: persisted in the metadata store, cached here."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._acls: tuple[AclBinding, ...] = ()
        # (resource type, literal name) -> bindings; resource type -> PREFIXED bindings
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[int, list[AclBinding]] = {}

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    @acls.setter
    def acls(self, acls: tuple[AclBinding, ...]) -> None:
        literal: dict[tuple[int, str], list[AclBinding]] = {}
        prefixed: dict[int, list[AclBinding]] = {}
        for acl in acls:
            if acl.pattern_type == PAT_PREFIXED:
                prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
        self._acls, self._literal, self._prefixed = acls, literal, prefixed

    def on_resource(self, resource_type: int, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers (resource_type, name): literal, "*" and prefixes."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD_NAME:
            found.extend(self._literal.get((resource_type, WILDCARD_NAME), ()))
        found.extend(a for a in self._prefixed.get(resource_type, ())
                     if name.startswith(a.resource_name))
        return found

    async def load(self) -> None:
        try:
            data, _stat = await self._store.get(ACLS_PATH)
        except NoNodeError:
            self.acls = ()
            return
        self.acls = tuple(_decode(data))

    async def _change(
        self, change: Callable[[list[AclBinding]], list[AclBinding]]
    ) -> list[AclBinding]:
        """Apply `change` to the stored list by CAS; returns the new list."""
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = await self._store.get(ACLS_PATH)
                current, version = _decode(data), stat.version
            except NoNodeError:
                current, version = [], -2
            new = change(list(current))
            try:
                if version == -2:
                    await self._store.create(ACLS_PATH, _encode(new), make_parents=True)
                else:
                    await self._store.set(ACLS_PATH, _encode(new), version)
            except (BadVersionError, NodeExistsError):
                continue
            self.acls = tuple(new)
            return new
        raise MetadataError("the ACL node kept changing; giving up")

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add bindings (already validated); ones that exist already are kept once."""
        wanted = list(bindings)

        def add(current: list[AclBinding]) -> list[AclBinding]:
            present = set(current)
            for acl in wanted:
                if acl not in present:
                    current.append(acl)
                    present.add(acl)
            return current

        await self._change(add)

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding any filter matches; per filter, the bindings it matched."""
        matched: list[list[AclBinding]] = []

        def remove(current: list[AclBinding]) -> list[AclBinding]:
            matched.clear()
            matched.extend([a for a in current if f.matches(a)] for f in filters)
            doomed = {a for group in matched for a in group}
            return [a for a in current if a not in doomed]

        await self._change(remove)
        return matched

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [a for a in self._acls if acl_filter.matches(a)]

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reload whenever the ACL node changes (start in the broker's background nursery)."""
        async with self._store.watch(ACLS_PATH) as watcher:
            await self.load()
            task_status.started()
            async for _event in watcher:
                try:
                    await self.load()
                except (MetadataError, ValueError):
                    log.warning("reloading ACLs failed", exc_info=True)


class Authorizer:
    """Decides whether a principal may do an operation on a resource (see the module doc)."""

    def __init__(self, acls: AclStore, *, enabled: bool, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.acls = acls
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        allowed = decide(self.acls.on_resource(resource_type, name), principal, host, operation,
                         resource_type, name, allow_if_no_acl=self.allow_if_no_acl)
        if not allowed:
            log.debug("denied", extra={"principal": principal, "host": host, "operation": operation,
                                      "resource_type": resource_type, "resource": name})
        return allowed

    def authorize_by_type(self, principal: str, host: str, operation: int,
                          resource_type: int) -> bool:
        """`operation` allowed on some resource of `resource_type` (acl_model.decide_by_type)."""
        if not self.enabled or principal in self.super_users:
            return True
        return decide_by_type(self.acls.acls, principal, host, operation, resource_type,
                              allow_if_no_acl=self.allow_if_no_acl)
