"""The admin operations over a running broker, as JSON.

`AdminContext` holds the components a process has (metadata store, topic service, namespace
registry, group coordinator, bookie storages, broker metrics); gateway/admin/routes.py maps the
HTTP endpoints (listed in docs/admin.md, "Admin HTTP API") onto the operations here and in
gateway/admin/groups.py, and the console (gateway/admin/console/) shows them.  The CLI
(`ledgerwire admin ...`, gateway/cli/admin/) calls these endpoints; nothing else changes
cluster state behind the topic service's or the namespace registry's back.

This module must never touch the Kafka listener or a partition's ledgers directly: topics go
through TopicService, groups through the coordinator, namespaces through NamespaceRegistry.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from gateway.admin import groups as admin_groups
from gateway.admin.http_server import HttpError, HttpRequest
from gateway.admin.metrics import (
    BookieGauges,
    BrokerMetrics,
    Histogram,
    MetricsSnapshot,
)
from gateway.cluster.bookie_capacity import BookieCapacity, read_capacity
from gateway.topics.namespaces import NamespaceError, NamespaceRegistry
from ledger_backend.autorecovery.under_replication import list_underreplicated
from ledger_backend.client.ledger_metadata import LedgerMetadata, ledger_path
from ledger_backend.metadata.store import MetadataError, MetadataStore, NoNodeError
from protocols.kafka.errors import KafkaProtocolError, UnknownTopicOrPartitionError

_log = logging.getLogger("ledgerwire.admin")


@dataclass
class LocalBookie:
    bookie_id: str
    address: str
    storage: Any  # ledger_backend.bookie.storage.BookieStorage
    journal_fsync: Histogram | None = None


@dataclass
class AdminContext:
    store: MetadataStore
    topics: Any  # gateway.topics.topic_service.TopicService
    namespaces: NamespaceRegistry
    coordinator: Any = None  # protocols.kafka.group_coordinator.GroupCoordinator
    broker_metrics: BrokerMetrics = field(default_factory=BrokerMetrics)
    bookies: list[LocalBookie] = field(default_factory=list)
    broker_id: int = 0
    kafka_address: str = ""
    ready: bool = False
    retention: Any = None  # gateway.topics.retention_policies.RetentionPolicies
    # A cluster broker (gateway/process/cluster_services.py) sets these: /ready also asks
    # ready_check;
    # bookies and brokers come from the registries; owner_of names the owner of a partition
    # (describe_topic never opens one owned elsewhere).  None: this process owns everything.
    ready_check: Callable[[], bool] | None = None
    bookie_lister: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    broker_lister: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    owner_of: Callable[[str, int], int | None] | None = None
    tokens: Any = None  # gateway.security.admin_tokens.TokenStore (the /admin/v1/tokens API)
    share_groups: Any = None  # gateway.kafka.share_groups.ShareGroups (metrics, listings)
    replication: Any = None  # gateway.replication.service.ReplicationService (clusters, status)
    read_tickets: Any = None  # gateway.admin.read_tickets.ReadTicketIssuer (Spark executors)
    started_at: float = field(default_factory=time.time)

    def is_ready(self) -> bool:
        return self.ready and (self.ready_check is None or self.ready_check())


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass  # deleted while we walked (GC)
    return total


async def _ledger_metadata(store: MetadataStore, ledger_id: int) -> LedgerMetadata | None:
    try:
        data, _ = await store.get(ledger_path(ledger_id))
    except NoNodeError:
        return None
    return LedgerMetadata.from_json_bytes(data)


# --- topics -------------------------------------------------------------------------------------

def list_topics(ctx: AdminContext, namespace: str | None,
                include_internal: bool = True) -> list[dict[str, Any]]:
    """Topics (of one namespace); system topics (RocketMQ's schedule, transaction and retry
    topics) only with `include_internal`, each marked `internal`."""
    out = []
    for name, info in sorted(ctx.topics.topics().items()):
        ns = ctx.namespaces.namespace_of(name)
        internal = ctx.topics.is_internal(name)
        if (namespace is None or ns == namespace) and (include_internal or not internal):
            out.append({"topic": name, "partitions": info.partitions, "namespace": ns,
                        "internal": internal})
    return out


async def describe_topic(ctx: AdminContext, name: str) -> dict[str, Any]:
    info = ctx.topics.topics().get(name) or await ctx.topics.refresh_topic(name)
    if info is None:
        raise HttpError(404, f"topic {name!r} does not exist")
    partitions: list[dict[str, Any]] = []
    for p in range(info.partitions):
        owner = ctx.owner_of(name, p) if ctx.owner_of is not None else ctx.broker_id
        if owner != ctx.broker_id:  # its owner describes it (opening it here would fence it)
            partitions.append({"partition": p, "owner": owner, "bytes": None, "ledgers": None,
                               "managed_ledger": ctx.topics.managed_ledger_name(name, p)})
            continue
        plog = await ctx.topics.partition(name, p)
        ledgers = []
        for ledger in ctx.topics.partition_ledgers(name, p):
            meta = await _ledger_metadata(ctx.store, ledger.ledger_id)
            ledgers.append({
                "ledger_id": ledger.ledger_id, "entries": ledger.entries, "bytes": ledger.size,
                "created_ms": ledger.created_ms,
                "state": meta.state.value if meta else None,
                "ensemble_size": meta.ensemble_size if meta else None,
                "write_quorum": meta.write_quorum if meta else None,
                "ack_quorum": meta.ack_quorum if meta else None,
                "ensemble": list(meta.current_ensemble) if meta else None,
            })
        partitions.append({
            "partition": p, "owner": ctx.broker_id,
            "managed_ledger": ctx.topics.managed_ledger_name(name, p),
            "log_start_offset": plog.log_start_offset, "log_end_offset": plog.high_watermark,
            "bytes": sum(x["bytes"] for x in ledgers), "ledgers": ledgers,
        })
    return {"topic": name, "topic_id": str(info.topic_id), "partitions": partitions,
            "namespace": ctx.namespaces.namespace_of(name), "configs": dict(info.configs),
            "bytes": sum(p["bytes"] or 0 for p in partitions)}


async def _open_owned_partitions(ctx: AdminContext, name: str) -> None:
    """Open each partition of topic `name` that this broker owns (404 for no such topic)."""
    info = ctx.topics.topics().get(name) or await ctx.topics.refresh_topic(name)
    if info is None:
        raise HttpError(404, f"topic {name!r} does not exist")
    for p in range(info.partitions):
        owner = ctx.owner_of(name, p) if ctx.owner_of is not None else ctx.broker_id
        if owner == ctx.broker_id:
            await ctx.topics.partition(name, p)


async def compact_topic(ctx: AdminContext, name: str) -> list[dict[str, Any]]:
    """A compaction pass now on each partition of `name` this broker owns (opened if need be;
    partitions owned elsewhere are compacted by their owner's background pass)."""
    await _open_owned_partitions(ctx, name)
    result: list[dict[str, Any]] = await ctx.topics.compaction.compact_topic(name)
    return result


async def offload_topic(ctx: AdminContext, name: str) -> list[dict[str, Any]]:
    """Offload the closed ledgers of each partition of `name` this broker owns now (opened if
    need be; partitions owned elsewhere are offloaded by their owner's background pass)."""
    await _open_owned_partitions(ctx, name)
    result: list[dict[str, Any]] = await ctx.topics.offload.offload_topic(name)
    return result


async def create_topic(ctx: AdminContext, name: str, body: dict[str, Any]) -> dict[str, Any]:
    partitions = body.get("partitions", -1)
    configs = body.get("configs") or {}
    if isinstance(partitions, bool) or not isinstance(partitions, int) or \
            not isinstance(configs, dict):
        raise HttpError(400, "partitions must be an integer and configs an object")
    if body.get("namespace"):
        await ctx.namespaces.map_topic(name, str(body["namespace"]))
    await ctx.topics.create_topic(name, partitions, {str(k): str(v) for k, v in configs.items()})
    info = ctx.topics.topics()[name]
    return {"topic": name, "partitions": info.partitions,
            "namespace": ctx.namespaces.namespace_of(name)}


# --- bookies, brokers, metrics ---------------------------------------------------------------

async def bookie_rows(ctx: AdminContext) -> list[dict[str, Any]]:
    if ctx.bookie_lister is not None:
        return await ctx.bookie_lister()
    return await _local_bookie_rows(ctx)


async def _local_bookie_rows(ctx: AdminContext) -> list[dict[str, Any]]:
    rows = []
    for b in ctx.bookies:
        used, total = await trio.to_thread.run_sync(b.storage.disk_usage)
        data_bytes = await trio.to_thread.run_sync(_dir_bytes, b.storage.config.data_dir)
        rows.append({"bookie": b.bookie_id, "address": b.address,
                     "state": "read-only" if b.storage.is_read_only() else "read-write",
                     "disk_used_bytes": used, "disk_total_bytes": total,
                     "data_bytes": data_bytes, "ledgers": len(b.storage.ledger_ids())})
    return rows


async def garbage_collect(ctx: AdminContext) -> list[dict[str, Any]]:
    """Run retention now, then GC and a major compaction on every local bookie (tests, ops)."""
    deleted = await ctx.topics.apply_retention()
    out = []
    for b in ctx.bookies:
        before = await trio.to_thread.run_sync(_dir_bytes, b.storage.config.data_dir)
        await b.storage.garbage_collect()
        await b.storage.compact(major=True)
        after = await trio.to_thread.run_sync(_dir_bytes, b.storage.config.data_dir)
        out.append({"bookie": b.bookie_id, "data_bytes_before": before,
                    "data_bytes_after": after})
    return [{"ledgers_deleted_by_retention": deleted}, *out]


async def metrics_snapshot(ctx: AdminContext) -> MetricsSnapshot:
    partitions = []
    for (topic, p), plog in sorted(ctx.topics.open_partitions().items()):
        ledgers = ctx.topics.partition_ledgers(topic, p)
        partitions.append({"topic": topic, "partition": p, "log_start": plog.log_start_offset,
                           "log_end": plog.high_watermark, "ledgers": len(ledgers),
                           "bytes": sum(x.size for x in ledgers),
                           "compaction": ctx.topics.compaction.gauges(topic, p, plog),
                           "offload": ctx.topics.offload.gauges(topic, p, plog)})
    lag = (admin_groups.lag_of_open_partitions(ctx.coordinator, ctx.topics)
           if ctx.coordinator is not None else [])
    bookies = []
    for row, b in zip(await _local_bookie_rows(ctx), ctx.bookies, strict=True):
        bookies.append(BookieGauges(
            b.bookie_id, row["state"], row["disk_used_bytes"], row["disk_total_bytes"],
            b.storage.read_cache.hits, b.storage.read_cache.misses, b.journal_fsync))
    try:
        under = len(await list_underreplicated(ctx.store))
    except MetadataError:
        under = 0
    try:
        capacity: BookieCapacity | None = await bookie_capacity(ctx)
    except MetadataError:
        capacity = None
    shares = ctx.share_groups.delivery.stats() if ctx.share_groups is not None else []
    dead = dict(ctx.share_groups.dead_lettered) if ctx.share_groups is not None else {}
    return MetricsSnapshot(ctx.broker_metrics, partitions, lag, bookies, under,
                           started_at=ctx.started_at, capacity=capacity,
                           share_partitions=shares, share_dead_lettered=dead,
                           replication=(ctx.replication.metrics_rows()
                                        if ctx.replication is not None else []))


async def bookie_capacity(ctx: AdminContext) -> BookieCapacity:
    """Live bookies against the broker's ensemble size (gateway/cluster/bookie_capacity.py)."""
    return await read_capacity(ctx.store, ctx.topics.config.ensemble_size)


async def bookie_capacity_json(ctx: AdminContext) -> dict[str, object]:
    return (await bookie_capacity(ctx)).to_json()


async def run_retention(ctx: AdminContext) -> dict[str, Any]:
    """One retention/TTL pass now (the background task does it every minute)."""
    if ctx.retention is None:
        return {"ledgers_deleted_by_retention": await ctx.topics.apply_retention()}
    result = await ctx.retention.apply_once()
    return dict(result.to_json())


# --- helpers the routes and the console share ------------------------------------------------

async def broker_rows(ctx: AdminContext) -> list[dict[str, Any]]:
    if ctx.broker_lister is not None:
        return await ctx.broker_lister()
    return [{"broker_id": ctx.broker_id, "kafka": ctx.kafka_address, "state": "owning",
             "partitions_open": len(ctx.topics.open_partitions())}]


async def translate_errors(action: Awaitable[Any]) -> Any:
    """Await `action`, turning the services' refusals into HTTP errors."""
    try:
        return await action
    except NamespaceError as exc:
        raise HttpError(exc.status, str(exc)) from exc
    except UnknownTopicOrPartitionError as exc:
        raise HttpError(404, exc.message or "unknown topic") from exc
    except KafkaProtocolError as exc:
        raise HttpError(409 if "EXISTS" in exc.code.name else 400,
                        f"{exc.code.name}: {exc.message}") from exc


async def create_topic_checked(ctx: AdminContext, name: str,
                               body: dict[str, Any]) -> dict[str, Any]:
    return dict(await translate_errors(create_topic(ctx, name, body)))


async def delete_topic_checked(ctx: AdminContext, name: str) -> dict[str, Any]:
    await translate_errors(ctx.topics.delete_topic(name))
    return {"deleted": name}


def coordinator_of(ctx: AdminContext) -> Any:
    if ctx.coordinator is None:
        raise HttpError(503, "no group coordinator in this process")
    return ctx.coordinator


def body_object(request: HttpRequest) -> dict[str, Any]:
    body = request.json()
    if not isinstance(body, dict):
        raise HttpError(400, "body must be a JSON object")
    return body


def watch_bookie(bookie_id: str, address: str, storage: Any) -> LocalBookie:
    """A local bookie for the admin API, its journal timed into a fresh histogram."""
    hist = Histogram()
    journal = getattr(storage, "journal", None)
    if journal is not None:
        journal.fsync_observer = hist.observe
    return LocalBookie(bookie_id, address, storage, hist)
