"""Pulsar-style retention and TTL on top of Kafka partitions, driven by namespace policies.

(Backlog quotas, the third of Pulsar's consumption policies, live in
gateway/topics/backlog_quota.py;
a pass here runs a backlog pass first when `backlog` is set.)

How Pulsar's policies map onto ledgerwire (and Kafka's topic configs):

- A namespace with `retention_time_minutes = 0` (Pulsar's "no retention") deletes data once
  every consumer group that committed on a partition has committed past it: the ledgers whose
  every offset is below the smallest committed offset go, whole, and the log start moves to the
  first ledger kept.  A partition no group committed on keeps its data (nothing consumed it).
- A namespace with a retention time or size (> 0) keeps data until it crosses that bound; it is
  the managed ledger's own trimming (`retention_time_s` / `retention_bytes`), the same path a
  topic's `retention.ms` / `retention.bytes` take -- a topic config wins over its namespace.
- `message_ttl_seconds`: a group whose committed offset points at messages older than the TTL
  has its committed offset moved to the first message still inside the TTL (or the log end),
  so the lagging group skips what expired, and consumed-retention can then free those ledgers.

Deletion is always of whole ledgers, in the background (`run`) or on demand (`apply_once`);
bookies reclaim the space in their GC/compaction once the ledgers' metadata is gone.

This module must never delete part of a ledger, nor move a committed offset backwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger.types import Position
from protocols.kafka.group_model import CommittedOffset

log = logging.getLogger("ledgerwire.retention")


@dataclass
class RetentionPass:
    """What one pass did (the admin API returns it)."""

    ledgers_deleted: dict[str, int] = field(default_factory=dict)  # partition -> count
    offsets_expired: list[dict[str, Any]] = field(default_factory=list)
    backlog: dict[str, Any] = field(default_factory=dict)  # the backlog quota pass, if any

    def to_json(self) -> dict[str, Any]:
        return {"ledgers_deleted": self.ledgers_deleted, "offsets_expired": self.offsets_expired,
                "backlog": self.backlog}


def consumed_ledger_cut(bases: list[tuple[int, int | None]], min_committed: int,
                        high_watermark: int) -> int | None:
    """The offset to move the log start to so that only fully consumed ledgers go.

    `bases` is [(ledger id, base offset of its first entry, None when the ledger is empty)] in
    log order.  A ledger is fully consumed when the next non-empty ledger starts at or below
    `min_committed` (the last ledger: when `min_committed` reaches the high watermark).
    Returns the base offset of the first ledger kept, or None when nothing can go.
    """
    starts = [b for _, b in bases if b is not None]
    if len(starts) == 0:
        return None
    cut: int | None = None
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else high_watermark
        if end <= min_committed and end > start:
            cut = end
        else:
            break
    return cut


class RetentionScope(Protocol):
    """Where a pass may act when this process owns only part of a cluster
    (gateway/process/cluster_services.py ClusterRetentionScope).  `committed_floors` is the smallest
    offset committed on each partition by *any* group of the cluster, or None when some
    groups' offsets are unknown (then no consumed data is deleted)."""

    def owns(self, topic: str, partition: int) -> bool: ...
    async def committed_floors(self) -> Mapping[tuple[str, int], int] | None: ...


def committed_offsets(coordinator: Any, topic: str,
                      partition: int) -> dict[str, CommittedOffset]:
    """Every group's committed offset on a partition (groups that committed nothing left out)."""
    out = {}
    for group_id, offsets in coordinator.offsets.items():
        committed = offsets.get((topic, partition))
        if committed is not None and committed.offset >= 0:
            out[group_id] = committed
    return out


async def advance_committed(coordinator: Any, group_id: str, topic: str, partition: int,
                            committed: CommittedOffset, to: int, now_ms: int) -> None:
    """Move a group's committed offset forward to `to` (TTL, backlog eviction)."""
    if to <= committed.offset:
        return
    # Pulsar's TTL and backlog eviction skip messages for active subscriptions too, so
    # membership is not checked; the coordinator re-checks "forward only" at write time (a
    # consumer may have committed past `to` since `committed` was read).
    await coordinator.advance_offsets(group_id, {
        (topic, partition): CommittedOffset(to, committed.leader_epoch, committed.metadata,
                                            now_ms)})


class RetentionPolicies:
    def __init__(self, topics: Any, namespaces: Any, coordinator: Any,
                 now_ms: Any = None, *, scope: RetentionScope | None = None) -> None:
        self._topics = topics
        self._namespaces = namespaces
        self._coordinator = coordinator
        self._scope = scope
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        # gateway.topics.backlog_quota.BacklogQuotas, or None: run with every pass (its eviction
        # moves
        # offsets forward like TTL, before consumed data is deleted).
        self.backlog: Any = None

    async def run(self, interval_s: float = 60.0) -> None:
        while True:
            await trio.sleep(interval_s)
            try:
                await self.apply_once()
            except Exception:  # a background pass must never take the broker down
                log_failure(log, "retention pass failed")

    async def apply_once(self) -> RetentionPass:
        """TTL first (it moves offsets forward), then consumed-data deletion, then the time and
        size bounds (the topic service's own retention)."""
        result = RetentionPass()
        if self.backlog is not None:
            result.backlog = (await self.backlog.apply_once()).to_json()
        floors = await self._scope.committed_floors() if self._scope is not None else None
        for (topic, partition), plog in sorted(self._topics.open_partitions().items()):
            if plog.failed or plog.closing:
                continue
            if self._scope is not None and not self._scope.owns(topic, partition):
                continue
            try:
                with plog.pinned():  # not unloaded as idle under the pass
                    await self._apply_to_partition(topic, partition, plog, floors, result)
            except Exception:  # e.g. trimmed or closed under the pass: the next pass retries
                log_failure(log, "retention of %s-%d not applied", topic, partition)
        await self._topics.apply_retention()
        return result

    async def _apply_to_partition(self, topic: str, partition: int, plog: Any,
                                  floors: Any, result: RetentionPass) -> None:
        policies = self._namespaces.topic_policies(topic)
        if policies.message_ttl_seconds is not None and policies.message_ttl_seconds > 0:
            await self._expire(topic, partition, plog, policies.message_ttl_seconds, result)
        if policies.retention_time_minutes == 0 and \
                "retention.ms" not in self._topics.topics().get(topic, _NO_INFO).configs:
            deleted = await self._delete_consumed(topic, partition, plog, floors)
            if deleted:
                result.ledgers_deleted[f"{topic}-{partition}"] = deleted

    def _committed(self, topic: str, partition: int) -> dict[str, CommittedOffset]:
        return committed_offsets(self._coordinator, topic, partition)

    async def _expire(self, topic: str, partition: int, plog: Any, ttl_s: int,
                      result: RetentionPass) -> None:
        cutoff = self._now_ms() - ttl_s * 1000
        found = await plog.offset_for_timestamp(cutoff)
        first_live = plog.high_watermark if found is None else found[0]
        for group_id, committed in self._committed(topic, partition).items():
            if committed.offset >= first_live:
                continue
            await advance_committed(self._coordinator, group_id, topic, partition, committed,
                                    first_live, self._now_ms())
            result.offsets_expired.append({"group": group_id, "topic": topic,
                                           "partition": partition, "from": committed.offset,
                                           "to": first_live})
            log.info("TTL moved committed offset", extra={
                "group": group_id, "topic": topic, "partition": partition,
                "from": committed.offset, "to": first_live})

    async def _delete_consumed(self, topic: str, partition: int, plog: Any,
                               floors: Mapping[tuple[str, int], int] | None = None) -> int:
        committed = [c.offset for c in self._committed(topic, partition).values()]
        if self._scope is not None:  # a cluster: groups coordinated elsewhere count too
            if floors is None:
                return 0
            if (topic, partition) in floors:
                committed.append(floors[(topic, partition)])
        if not committed:
            return 0
        min_committed = min(committed)
        ledgers = self._topics.partition_ledgers(topic, partition)
        if len(ledgers) < 2 and min_committed < plog.high_watermark:
            return 0
        bases: list[tuple[int, int | None]] = []
        for ledger in ledgers:
            if ledger.entries == 0:
                bases.append((ledger.ledger_id, None))
                continue
            header = await plog.read_header(Position(ledger.ledger_id, 0))
            bases.append((ledger.ledger_id, header.base_offset))
        cut = consumed_ledger_cut(bases, min_committed, plog.high_watermark)
        if cut is None or cut <= plog.log_start_offset:
            return 0
        before = len(ledgers)
        await plog.delete_records_before(cut)
        deleted = before - len(self._topics.partition_ledgers(topic, partition))
        log.info("consumed ledgers deleted", extra={"topic": topic, "partition": partition,
                                                    "ledgers": deleted, "log_start": cut})
        return deleted


@dataclass(frozen=True)
class _NoInfo:
    configs: dict[str, str] = field(default_factory=dict)


_NO_INFO = _NoInfo()
