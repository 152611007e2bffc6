"""Tenants, namespaces and their policies, kept in the metadata store (as Pulsar/KoP do).

A Kafka topic `orders` lives in the default namespace (`public/default` unless configured),
so partition p of it is the managed ledger "public/default/orders-p".  A topic named
`<tenant>.<namespace>.<rest>` lives in `<tenant>/<namespace>` when that namespace exists, and an
explicit mapping (a Kafka topic name -> "tenant/namespace") reaches any other.

Layout in the store (every node JSON with a "format" field, changed by compare-and-set only):

    /ledgerwire/tenants/<tenant>                    {"format", "admin_roles", "allowed_principals"}
    /ledgerwire/namespaces/<tenant>/<namespace>     {"format", "policies": {...}}
    /ledgerwire/topic-namespaces/<kafka topic>      {"format", "namespace": "tenant/ns"}

    /ledgerwire/namespace-changes                   touched after every change (followers watch it)

Policies (`NamespacePolicies`): ensemble/write/ack quorum, retention time and size, message TTL,
max topics, auto-create on/off, the clusters it is replicated to (gateway/replication/),
backlog quota (size and/or time limit of the slowest group's
unconsumed backlog, and what happens beyond it: gateway/topics/backlog_quota.py).  None means "the
broker's default".

The registry keeps a synchronous cache (the topic service asks it on every partition open and
must not wait on the store there); `load()` fills it and every change made through the registry
updates it.  `follow()` keeps it in step with changes made by other processes (another broker of
a cluster, an admin API served elsewhere): a watch on the change marker, which every registry
touches after it changed something, plus a periodic full re-read for what a watch can miss.

This module must never change a node without a version check, nor import protocol code.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

log = logging.getLogger("ledgerwire.namespaces")

TENANTS_PATH = "/ledgerwire/tenants"
NAMESPACES_PATH = "/ledgerwire/namespaces"
TOPIC_NAMESPACES_PATH = "/ledgerwire/topic-namespaces"
NAMESPACE_CHANGES_PATH = "/ledgerwire/namespace-changes"
NAMESPACE_REFRESH_INTERVAL_S = 10.0
# Pulsar's backlog quota retention policies (BacklogQuota.RetentionPolicy), default first.
BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
NAMESPACE_FORMAT_VERSION = 1
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


_STRING_POLICIES = ("offload_directory", "offload_bucket", "offload_prefix")


class NamespaceError(ValueError):
    """A tenant/namespace operation that cannot be done (code: an HTTP-ish status)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class NamespacePolicies:
    ensemble_size: int | None = None
    write_quorum: int | None = None
    ack_quorum: int | None = None
    retention_time_minutes: int | None = None  # -1: keep forever
    retention_size_mb: int | None = None  # -1: no size bound
    message_ttl_seconds: int | None = None  # lagging groups skip messages older than this
    max_topics: int | None = None
    auto_create_topics: bool | None = None
    backlog_quota_mb: int | None = None  # per partition: the slowest group's unconsumed bytes
    backlog_quota_time_seconds: int | None = None  # ... or the age of its oldest unconsumed one
    backlog_quota_policy: str | None = None  # one of BACKLOG_POLICIES (None: the first)
    # tiered storage ([offload]): keep at most this much per partition on bookies, offloading
    # the oldest closed ledgers; -1: never, 0: as soon as a ledger closes (None: [offload])
    offload_threshold_mb: int | None = None
    offload_threshold_seconds: int | None = None  # ... and ledgers older than this; -1 never
    # bookie copies of offloaded ledgers are deleted this long after the offload was verified;
    # -1: kept (None: [offload] deletion_lag_s); a topic's offload.deletion.lag.ms wins
    offload_deletion_lag_seconds: int | None = None
    # where this namespace's ledgers are offloaded, with [offload]'s driver and credentials:
    # a directory (filesystem driver) or a bucket and/or prefix (s3); None: [offload]'s
    offload_directory: str | None = None
    offload_bucket: str | None = None
    offload_prefix: str | None = None
    # geo-replication (gateway/replication/): the clusters every topic here lives in
    replication_clusters: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> NamespacePolicies:
        """Parse and validate (unknown keys, wrong types and E >= Qw >= Qa are refused)."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in known:
                raise NamespaceError(f"unknown policy {key!r} (known: {sorted(known)})")
            if value is None:
                continue
            if key == "auto_create_topics":
                if not isinstance(value, bool):
                    raise NamespaceError(f"{key} must be true or false")
            elif key == "replication_clusters":
                if isinstance(value, str):  # the CLI's replication_clusters=east,west
                    value = [c.strip() for c in value.split(",") if c.strip()]
                if not isinstance(value, list) or not all(
                        isinstance(c, str) and _LEGAL_NAME.fullmatch(c) for c in value):
                    raise NamespaceError(f"{key} must be a list of cluster names")
                value = sorted(set(value))
            elif key in _STRING_POLICIES:
                if isinstance(value, int) and not isinstance(value, bool):
                    value = str(value)  # the CLI's offload_prefix=2024
                if not isinstance(value, str) or not value or "\x00" in value:
                    raise NamespaceError(f"{key} must be a non-empty string")
            elif key == "backlog_quota_policy":
                if value not in BACKLOG_POLICIES:
                    raise NamespaceError(f"{key} must be one of {list(BACKLOG_POLICIES)}")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise NamespaceError(f"{key} must be an integer")
            values[key] = value
        policies = cls(**values)
        policies.check_quorums()
        return policies

    def merged(self, update: dict[str, Any]) -> NamespacePolicies:
        doc = self.to_json()
        doc.update(update)
        return NamespacePolicies.from_json({k: v for k, v in doc.items() if v is not None})

    def check_quorums(self) -> None:
        e, qw, qa = self.ensemble_size, self.write_quorum, self.ack_quorum
        given = [q for q in (e, qw, qa) if q is not None]
        if any(q < 1 for q in given):
            raise NamespaceError("quorum sizes must be >= 1")
        if e is not None and qw is not None and qw > e:
            raise NamespaceError("write_quorum must be <= ensemble_size")
        if qw is not None and qa is not None and qa > qw:
            raise NamespaceError("ack_quorum must be <= write_quorum")


def check_offload_directory(value: Any, data_dir: Path | None) -> str:
    """A namespace's offload_directory as set through the admin API, normalised, or a 400.

    It must be absolute: a relative one would be resolved against each broker process's working
    directory, a different place per node and per restart. It must not overlap the node's data
    directory (be it, lie inside it or contain it): offloaded objects written among the bookies'
    journals and entry logs or the metadata store could clobber them, and deleting offloaded
    ledgers removes files by name there. Pulsar's filesystem offloader likewise takes its own
    root apart from the bookies' storage. Symbolic links are followed for the overlap check,
    so a link into the data directory is refused too; other brokers' data directories are not
    known here."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise NamespaceError("offload_directory must be a non-empty string")
    if not value.startswith("/"):
        raise NamespaceError(f"offload_directory must be an absolute path, not {value!r}")
    normal = "/" + posixpath.normpath(value).lstrip("/")
    if data_dir is not None:
        data = Path(os.path.realpath(data_dir))
        for candidate in {Path(normal), Path(os.path.realpath(normal))}:
            if candidate == data or data in candidate.parents or candidate in data.parents:
                raise NamespaceError(
                    f"offload_directory {normal!r} overlaps the broker's data directory "
                    f"{str(data)!r}; choose a directory apart from it")
    return normal


def check_name(kind: str, name: str) -> None:
    if not _LEGAL_NAME.fullmatch(name):
        raise NamespaceError(f"{kind} name {name!r}: 1-64 of [a-zA-Z0-9_-]")


def split_namespace(full: str) -> tuple[str, str]:
    tenant, sep, namespace = full.partition("/")
    if not sep:
        raise NamespaceError(f"namespace {full!r} must be written tenant/namespace")
    check_name("tenant", tenant)
    check_name("namespace", namespace)
    return tenant, namespace


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps({"format": NAMESPACE_FORMAT_VERSION, **doc}, sort_keys=True).encode()


def _decode(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    if doc.get("format") != NAMESPACE_FORMAT_VERSION:
        raise NamespaceError(f"unknown namespace node format {doc.get('format')}", 500)
    return dict(doc)


class NamespaceRegistry:
    """Tenants, namespaces, policies and the topic -> namespace mapping (see module doc)."""

    def __init__(self, store: MetadataStore, default_namespace: str = "public/default", *,
                 data_dir: Path | None = None) -> None:
        self._store = store
        self.default_namespace = default_namespace
        self.data_dir = data_dir  # a namespace's offload_directory must stay apart from it
        self._tenants: dict[str, dict[str, Any]] = {}
        self._policies: dict[str, NamespacePolicies] = {}
        self._explicit: dict[str, str] = {}
        # bumped with every change to the cache (made here, or found by a re-read): a reader
        # that derives something from every topic's policies recomputes it only then
        self.version = 0

    async def load(self) -> None:
        """Read everything into the cache; create the default tenant and namespace if missing."""
        tenant, namespace = split_namespace(self.default_namespace)
        for path, doc in ((f"{TENANTS_PATH}/{tenant}", {"admin_roles": [],
                                                        "allowed_principals": []}),
                          (f"{NAMESPACES_PATH}/{tenant}/{namespace}", {"policies": {}})):
            try:
                await self._store.create(path, _encode(doc), make_parents=True)
            except NodeExistsError:
                pass
        await self.reload()

    async def reload(self) -> bool:
        """Re-read tenants, namespaces and topic mappings; True when anything changed."""
        tenants: dict[str, dict[str, Any]] = {}
        policies: dict[str, NamespacePolicies] = {}
        for t in await self._children(TENANTS_PATH):
            data = await self._get(f"{TENANTS_PATH}/{t}")
            if data is None:  # deleted while we listed
                continue
            tenants[t] = _decode(data)
            for ns in await self._children(f"{NAMESPACES_PATH}/{t}"):
                data = await self._get(f"{NAMESPACES_PATH}/{t}/{ns}")
                if data is not None:
                    policies[f"{t}/{ns}"] = NamespacePolicies.from_json(
                        _decode(data)["policies"])
        explicit: dict[str, str] = {}
        for topic in await self._children(TOPIC_NAMESPACES_PATH):
            data = await self._get(f"{TOPIC_NAMESPACES_PATH}/{topic}")
            if data is not None:
                explicit[topic] = str(_decode(data)["namespace"])
        changed = (tenants, policies, explicit) != (self._tenants, self._policies, self._explicit)
        self._tenants, self._policies, self._explicit = tenants, policies, explicit
        self.version += changed
        return changed

    async def follow(self, on_change: Callable[[], Awaitable[None]] | None = None, *,
                     refresh_interval_s: float = NAMESPACE_REFRESH_INTERVAL_S) -> None:
        """Keep the cache in step with changes made elsewhere, until cancelled (or the store
        closes); `on_change` runs after a re-read that changed something (e.g. the topic
        service's reapply_configs, so new retention/quorum policies reach open partitions)."""
        while True:
            try:
                async with self._store.watch(NAMESPACE_CHANGES_PATH) as watcher:
                    while True:
                        if await self.reload() and on_change is not None:
                            await on_change()
                        with trio.move_on_after(refresh_interval_s):
                            await watcher.__anext__()
            except StopAsyncIteration:
                return
            except (MetadataError, NamespaceError, ValueError) as exc:
                log.warning("namespace follower: %r; retrying", exc)
                await trio.sleep(0.5)

    async def _touch(self) -> None:
        """Tell followers (other processes) that something changed: bump the marker node.
        Every change to the cache is followed by this call, before any await: `version` is
        bumped here first."""
        self.version += 1
        try:
            await self._store.set(NAMESPACE_CHANGES_PATH, b"", -1)
        except NoNodeError:
            try:
                await self._store.create(NAMESPACE_CHANGES_PATH, b"", make_parents=True)
            except NodeExistsError:
                await self._store.set(NAMESPACE_CHANGES_PATH, b"", -1)

    async def _get(self, path: str) -> bytes | None:
        try:
            data, _ = await self._store.get(path)
        except NoNodeError:
            return None
        return data

    async def _children(self, path: str) -> list[str]:
        try:
            return sorted(await self._store.children(path))
        except NoNodeError:
            return []

    # --- tenants ---------------------------------------------------------------------------------

    def tenants(self) -> dict[str, dict[str, Any]]:
        return {t: {k: v for k, v in doc.items() if k != "format"}
                for t, doc in self._tenants.items()}

    async def create_tenant(self, tenant: str, allowed_principals: list[str] | None = None) -> None:
        check_name("tenant", tenant)
        doc = {"admin_roles": [], "allowed_principals": list(allowed_principals or [])}
        try:
            await self._store.create(f"{TENANTS_PATH}/{tenant}", _encode(doc), make_parents=True)
        except NodeExistsError as exc:
            raise NamespaceError(f"tenant {tenant!r} already exists", 409) from exc
        self._tenants[tenant] = {"format": NAMESPACE_FORMAT_VERSION, **doc}
        await self._touch()

    async def delete_tenant(self, tenant: str) -> None:
        if tenant not in self._tenants:
            raise NamespaceError(f"tenant {tenant!r} does not exist", 404)
        if any(ns.startswith(f"{tenant}/") for ns in self._policies):
            raise NamespaceError(f"tenant {tenant!r} still has namespaces", 409)
        data, stat = await self._store.get(f"{TENANTS_PATH}/{tenant}")
        await self._store.delete(f"{TENANTS_PATH}/{tenant}", stat.version)
        self._tenants.pop(tenant, None)
        await self._touch()

    def principal_allowed(self, topic: str, principal: str) -> bool:
        """A tenant with allowed_principals admits only those (e.g. "User:alice"); else all."""
        tenant = self.namespace_of(topic).split("/", 1)[0]
        allowed = self._tenants.get(tenant, {}).get("allowed_principals") or []
        return not allowed or principal in allowed

    # --- namespaces ------------------------------------------------------------------------------

    def namespaces(self, tenant: str | None = None) -> list[str]:
        return sorted(ns for ns in self._policies
                      if tenant is None or ns.startswith(f"{tenant}/"))

    async def create_namespace(self, full: str, policies: dict[str, Any] | None = None) -> None:
        tenant, namespace = split_namespace(full)
        if tenant not in self._tenants:
            raise NamespaceError(f"tenant {tenant!r} does not exist", 404)
        parsed = NamespacePolicies.from_json(self._checked(policies or {}))
        try:
            await self._store.create(f"{NAMESPACES_PATH}/{tenant}/{namespace}",
                                     _encode({"policies": parsed.to_json()}), make_parents=True)
        except NodeExistsError as exc:
            raise NamespaceError(f"namespace {full!r} already exists", 409) from exc
        self._policies[full] = parsed
        await self._touch()

    async def delete_namespace(self, full: str, topics_in_it: list[str]) -> None:
        tenant, namespace = split_namespace(full)
        if full not in self._policies:
            raise NamespaceError(f"namespace {full!r} does not exist", 404)
        if full == self.default_namespace:
            raise NamespaceError("the default namespace cannot be deleted", 409)
        if topics_in_it:
            raise NamespaceError(f"namespace {full!r} still has topics {topics_in_it}", 409)
        path = f"{NAMESPACES_PATH}/{tenant}/{namespace}"
        _, stat = await self._store.get(path)
        await self._store.delete(path, stat.version)
        self._policies.pop(full, None)
        await self._touch()

    def _checked(self, update: dict[str, Any]) -> dict[str, Any]:
        """`update` with a new offload_directory checked and normalised (values already stored
        are not re-checked, so a registry still loads what an older version accepted)."""
        if update.get("offload_directory") is None:
            return update
        return {**update, "offload_directory": check_offload_directory(
            update["offload_directory"], self.data_dir)}

    def policies(self, full: str) -> NamespacePolicies:
        try:
            return self._policies[full]
        except KeyError:
            raise NamespaceError(f"namespace {full!r} does not exist", 404) from None

    async def set_policies(self, full: str, update: dict[str, Any]) -> NamespacePolicies:
        """Merge `update` into the namespace's policies (a null value resets one), by CAS."""
        tenant, namespace = split_namespace(full)
        path = f"{NAMESPACES_PATH}/{tenant}/{namespace}"
        update = self._checked(update)
        for _ in range(10):
            try:
                data, stat = await self._store.get(path)
            except NoNodeError:
                raise NamespaceError(f"namespace {full!r} does not exist", 404) from None
            current = NamespacePolicies.from_json(_decode(data)["policies"])
            doc = current.to_json()
            doc.update(update)
            new = NamespacePolicies.from_json({k: v for k, v in doc.items() if v is not None})
            try:
                await self._store.set(path, _encode({"policies": new.to_json()}), stat.version)
            except BadVersionError:  # someone else changed it meanwhile: read again
                continue
            self._policies[full] = new
            await self._touch()
            return new
        raise NamespaceError(f"namespace {full!r} kept changing", 409)

    # --- topic -> namespace ----------------------------------------------------------------------

    def namespace_of(self, topic: str) -> str:
        """The namespace a Kafka topic lives in (explicit mapping, tenant.ns. prefix, default)."""
        explicit = self._explicit.get(topic)
        if explicit is not None:
            return explicit
        parts = topic.split(".", 2)
        if len(parts) == 3 and parts[2] and f"{parts[0]}/{parts[1]}" in self._policies:
            return f"{parts[0]}/{parts[1]}"
        return self.default_namespace

    async def map_topic(self, topic: str, full: str) -> None:
        """Pin a Kafka topic to a namespace (do it before the topic is created)."""
        split_namespace(full)
        if full not in self._policies:
            raise NamespaceError(f"namespace {full!r} does not exist", 404)
        path = f"{TOPIC_NAMESPACES_PATH}/{topic}"
        try:
            await self._store.create(path, _encode({"namespace": full}), make_parents=True)
        except NodeExistsError as exc:
            raise NamespaceError(f"topic {topic!r} is already mapped", 409) from exc
        self._explicit[topic] = full
        await self._touch()

    def topic_policies(self, topic: str) -> NamespacePolicies:
        return self._policies.get(self.namespace_of(topic), NamespacePolicies())

    def auto_create_allowed(self, topic: str, broker_default: bool) -> bool:
        allowed = self.topic_policies(topic).auto_create_topics
        return broker_default if allowed is None else allowed

    def check_topic_count(self, topic: str, existing_topics: list[str]) -> None:
        """Refuse a new topic when its namespace already has max_topics."""
        full = self.namespace_of(topic)
        limit = self.topic_policies(topic).max_topics
        if limit is None:
            return
        count = sum(1 for t in existing_topics if self.namespace_of(t) == full)
        if count >= limit:
            raise NamespaceError(f"namespace {full} has reached max_topics={limit}", 409)
