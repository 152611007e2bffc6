"""Pulsar-style backlog quotas on Kafka (and RocketMQ) partitions, driven by namespace policies.

A partition's backlog is what its slowest consumer group has not consumed: from that group's
committed offset (only groups that committed on the partition count, as only subscriptions
count in Pulsar) to the log end.  Its size is estimated from ledger sizes, as Pulsar estimates
it (whole ledgers after the group's position, the ledger holding it pro rata by offsets); its
age is that of the oldest unconsumed message.  A namespace limits either or both
(`backlog_quota_mb`, `backlog_quota_time_seconds`) and says what happens beyond the limit
(`backlog_quota_policy`, Pulsar's BacklogQuota.RetentionPolicy):

- producer_request_hold (the default): a produce/send is held until the backlog is back within
  quota, at most `hold_timeout_s`, then refused as *retriable*;
- producer_exception: a produce/send is refused at once, as *not retriable*;
- consumer_backlog_eviction: the slowest groups' committed offsets are moved forward (never
  back) until the backlog is within quota, as TTL moves them; producers are never refused.

Backlog is computed in the background (`run`, and every retention pass), never on the produce
path: the pass keeps a per-partition "over quota" flag, and `admit()` -- which the Kafka produce
and RocketMQ send handlers call before appending -- is one dict lookup when the flag is clear.
So a partition may overshoot its quota by what producers write between two passes (as in
Pulsar, whose check also runs periodically); passes run faster while some partition is over.

Errors the clients get (KoP enforces no backlog quota on Kafka produce -- it appends below
Pulsar's producer path -- so these are our choice):

- Kafka, producer_exception: POLICY_VIOLATION (44).  The Java client's PolicyViolationException
  is not retriable and librdkafka treats it as permanent (not persisted), so the send fails at
  once, as Pulsar's ProducerBlockedQuotaExceededException does.
- Kafka, producer_request_hold timed out: THROTTLING_QUOTA_EXCEEDED (89).  The Java client's
  ThrottlingQuotaExceededException is a RetriableException, so it retries until
  delivery.timeout.ms, which is what "hold" means; librdkafka has no retry rule for it and
  fails the message (its default action is permanent), which an application sees as
  "Broker: Throttling quota has been exceeded".  `hold_timeout_s` (25 s) stays below clients'
  default request.timeout.ms (30 s) so the answer arrives before the client gives up.
- RocketMQ, producer_exception: SERVICE_NOT_AVAILABLE (14), RocketMQ's own answer when its store
  refuses writes (disk full); the client retries it retryTimesWhenSendFailed times and fails.
- RocketMQ, hold timed out: SYSTEM_BUSY (2), RocketMQ's flow-control answer.  Not in the Java
  4.x producer's resend codes (it reports "broker busy", as under Apache's own flow control);
  the C++ 2.x producer resends on any failure; RocketMQ 5 clients retry TOO_MANY_REQUESTS.

In a cluster, groups coordinated by other brokers count through a RetentionScope's committed
floors (gateway/topics/retention_policies.py); eviction moves only the groups coordinated here.
RocketMQ consumer groups keep their offsets outside the Kafka coordinator; the RocketMQ side
registers them as an offset source (`add_offset_source`: standalone RocketMQOffsets, in a
cluster the per-bundle offsets of the bundles owned here), and they count -- and are evicted --
like coordinator groups.

This module must never block or read storage on the produce path, nor move a committed offset
backwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from gateway.topics.retention_policies import advance_committed, committed_offsets
from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger.types import Position
from protocols.kafka.record_batch import parse_header

log = logging.getLogger("ledgerwire.backlog_quota")

HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
DEFAULT_HOLD_TIMEOUT_S = 25.0


@dataclass(frozen=True)
class LedgerSpan:
    """A non-empty ledger of a partition: offsets [start, end) stored in `size` bytes."""

    start: int
    end: int
    size: int


def estimate_backlog_bytes(spans: list[LedgerSpan], from_offset: int) -> int:
    """Bytes from `from_offset` to the log end: later ledgers whole, its own pro rata."""
    total = 0
    for span in spans:
        if span.end <= from_offset or span.end <= span.start:
            continue
        if span.start >= from_offset:
            total += span.size
        else:
            total += span.size * (span.end - from_offset) // (span.end - span.start)
    return total


def eviction_offset(spans: list[LedgerSpan], limit_bytes: int) -> int | None:
    """The smallest offset whose estimated backlog is within `limit_bytes`; None when the whole
    log is (nothing to evict)."""
    remaining = limit_bytes
    for span in reversed(spans):
        if span.end <= span.start:
            continue
        if span.size <= remaining:
            remaining -= span.size
            continue
        return span.end - remaining * (span.end - span.start) // span.size
    return None


class CommittedOffsetSource(Protocol):
    """Consumer offsets kept outside the Kafka coordinator (RocketMQ groups), by storage topic
    and partition."""

    def committed_on(self, topic: str, partition: int) -> dict[str, int]:
        """group -> committed offset on the partition (groups without one left out)."""
        ...

    async def advance(self, group: str, topic: str, partition: int, to: int) -> None:
        """Move the group's committed offset forward to `to` (durably)."""
        ...


@dataclass(frozen=True)
class QuotaRefusal:
    """Why a produce is refused; `held`: it was held until the timeout (retriable) rather than
    refused at once (producer_exception, not retriable)."""

    message: str
    held: bool


@dataclass
class _OverQuota:
    policy: str
    message: str
    released: trio.Event = field(default_factory=trio.Event)


@dataclass
class BacklogPass:
    """What one pass found and did (the admin API's retention run returns it)."""

    over_quota: list[dict[str, Any]] = field(default_factory=list)
    evicted: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"over_quota": self.over_quota, "evicted": self.evicted}


class BacklogQuotas:
    """The background pass and the produce-path gate (see the module doc)."""

    def __init__(self, topics: Any, namespaces: Any, coordinator: Any, *,
                 now_ms: Callable[[], int] | None = None, scope: Any = None,
                 hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S) -> None:
        self._topics = topics
        self._namespaces = namespaces
        self._coordinator = coordinator
        self._scope = scope  # a RetentionScope in a cluster, else None
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.hold_timeout_s = hold_timeout_s
        self._over: dict[tuple[str, int], _OverQuota] = {}
        self._ledger_bases: dict[int, int] = {}  # ledger id -> base offset (never changes)
        self._offset_sources: list[CommittedOffsetSource] = []

    def add_offset_source(self, source: CommittedOffsetSource) -> None:
        """Count another protocol's consumer offsets (RocketMQ groups) in every pass."""
        if source not in self._offset_sources:
            self._offset_sources.append(source)

    def _other_committed(self, topic: str, partition: int
                         ) -> list[tuple[CommittedOffsetSource, str, int]]:
        return [(source, group, offset) for source in self._offset_sources
                for group, offset in source.committed_on(topic, partition).items()
                if offset >= 0]

    # --- produce path ----------------------------------------------------------------------------

    def over_quota(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._over

    async def admit(self, topic: str, partition: int) -> QuotaRefusal | None:
        """None when a produce to the partition may go ahead (at once when it is within quota);
        otherwise why it is refused, after holding it under producer_request_hold."""
        over = self._over.get((topic, partition))
        if over is None:
            return None
        deadline = trio.current_time() + self.hold_timeout_s
        while over.policy == HOLD:
            with trio.move_on_at(deadline):
                await over.released.wait()
            if not over.released.is_set():
                return QuotaRefusal(f"{over.message}; held {self.hold_timeout_s:g} s",
                                    held=True)
            # released: back within quota, or flagged anew (e.g. the policy changed)
            over = self._over.get((topic, partition))
            if over is None:
                return None
        return QuotaRefusal(over.message, held=False)

    # --- background pass -------------------------------------------------------------------------

    async def run(self, interval_s: float = 5.0, over_quota_interval_s: float = 1.0) -> None:
        """Pass forever; faster while a partition is over quota, so a held producer goes on
        soon after its consumers catch up."""
        while True:
            await trio.sleep(over_quota_interval_s if self._over else interval_s)
            try:
                await self.apply_once()
            except Exception:  # a background pass must never take the broker down
                log_failure(log, "backlog quota pass failed")

    async def apply_once(self) -> BacklogPass:
        result = BacklogPass()
        limited = self._limited_namespaces()
        if not limited:  # the usual case: no pass over every open partition (100,000 of them
            for key in list(self._over):  # took ~0.2 s of the event loop, every 5 s)
                self._release(key)
            self._ledger_bases.clear()
            return result
        floors: Mapping[tuple[str, int], int] | None = None
        if self._scope is not None:
            floors = await self._scope.committed_floors()
        open_partitions = self._topics.open_partitions()
        limited_topic: dict[str, bool] = {}  # (a topic's partitions ask once)
        for topic, _ in open_partitions:
            if topic not in limited_topic:
                limited_topic[topic] = self._namespaces.namespace_of(topic) in limited
        for key in [k for k in self._over
                    if k not in open_partitions or not limited_topic[k[0]]]:
            self._release(key)
        live_ledgers: set[int] = set()
        for (topic, partition), plog in sorted(
                item for item in open_partitions.items() if limited_topic[item[0][0]]):
            if plog.failed or plog.closing:  # (closing since listed: unloaded as idle)
                self._release((topic, partition))
                continue
            if self._scope is not None and not self._scope.owns(topic, partition):
                self._release((topic, partition))
                continue
            try:
                with plog.pinned():  # not unloaded as idle under the pass
                    await self._check(topic, partition, plog, floors, result, live_ledgers)
            except Exception:  # e.g. a ledger trimmed or closed under the pass: next pass
                log_failure(log, "backlog of %s-%d not checked", topic, partition)
                live_ledgers.update(self._ledger_bases)  # keep the cache on a failure
        for ledger_id in set(self._ledger_bases) - live_ledgers:
            del self._ledger_bases[ledger_id]
        return result

    def _limited_namespaces(self) -> set[str]:
        """The namespaces with a backlog quota (by size or by age)."""
        limited = set()
        for namespace in self._namespaces.namespaces():
            try:
                policies = self._namespaces.policies(namespace)
            except ValueError:  # NamespaceError: deleted meanwhile
                continue
            if any(limit is not None and limit >= 0 for limit in (
                    policies.backlog_quota_mb, policies.backlog_quota_time_seconds)):
                limited.add(namespace)
        return limited

    async def _check(self, topic: str, partition: int, plog: Any,
                     floors: Mapping[tuple[str, int], int] | None, result: BacklogPass,
                     live_ledgers: set[int]) -> None:
        key = (topic, partition)
        policies = self._namespaces.topic_policies(topic)
        limit_bytes = policies.backlog_quota_mb << 20 \
            if policies.backlog_quota_mb is not None and policies.backlog_quota_mb >= 0 else None
        limit_ms = policies.backlog_quota_time_seconds * 1000 \
            if policies.backlog_quota_time_seconds is not None \
            and policies.backlog_quota_time_seconds >= 0 else None
        policy = policies.backlog_quota_policy or HOLD
        if limit_bytes is None and limit_ms is None:
            self._release(key)
            return
        committed = committed_offsets(self._coordinator, topic, partition)
        positions = [c.offset for c in committed.values()]
        others = self._other_committed(topic, partition)
        positions += [offset for _, _, offset in others]
        if floors is not None and key in floors:
            positions.append(floors[key])
        end = plog.high_watermark
        if not positions or max(min(positions), plog.log_start_offset) >= end:
            self._release(key)
            return
        slowest = max(min(positions), plog.log_start_offset)
        spans = await self._ledger_spans(topic, partition, plog, live_ledgers)
        backlog_bytes = estimate_backlog_bytes(spans, slowest)
        age_ms = self._now_ms() - await self._timestamp_at(plog, slowest) \
            if limit_ms is not None else 0
        reasons = []
        if limit_bytes is not None and backlog_bytes > limit_bytes:
            reasons.append(f"backlog of {backlog_bytes} bytes exceeds "
                           f"{policies.backlog_quota_mb} MB")
        if limit_ms is not None and age_ms > limit_ms:
            reasons.append(f"oldest unconsumed message is {age_ms // 1000} s old, over "
                           f"{policies.backlog_quota_time_seconds} s")
        if not reasons:
            self._release(key)
            return
        message = f"{topic}-{partition}: backlog quota exceeded: {'; '.join(reasons)}"
        result.over_quota.append({"topic": topic, "partition": partition, "policy": policy,
                                  "backlog_bytes": backlog_bytes, "oldest_age_ms": age_ms,
                                  "slowest_offset": slowest})
        if policy == EVICTION:
            self._release(key)
            await self._evict(topic, partition, plog, committed, spans, limit_bytes, limit_ms,
                              result, others)
            return
        over = self._over.get(key)
        if over is None or over.policy != policy:
            if over is not None:
                over.released.set()
            self._over[key] = _OverQuota(policy, message)
            log.info("backlog quota exceeded", extra={"topic": topic, "partition": partition,
                                                      "policy": policy, "reason": message})
        else:
            over.message = message

    async def _evict(self, topic: str, partition: int, plog: Any, committed: dict[str, Any],
                     spans: list[LedgerSpan], limit_bytes: int | None, limit_ms: int | None,
                     result: BacklogPass,
                     others: list[tuple[CommittedOffsetSource, str, int]]) -> None:
        target = plog.log_start_offset
        if limit_bytes is not None:
            by_size = eviction_offset(spans, limit_bytes)
            if by_size is not None:
                target = max(target, by_size)
        if limit_ms is not None:
            found = await plog.offset_for_timestamp(self._now_ms() - limit_ms)
            target = max(target, plog.high_watermark if found is None else found[0])
        target = min(target, plog.high_watermark)
        for group_id, offset in committed.items():
            if offset.offset >= target:
                continue
            await advance_committed(self._coordinator, group_id, topic, partition, offset,
                                    target, self._now_ms())
            result.evicted.append({"group": group_id, "topic": topic, "partition": partition,
                                   "from": offset.offset, "to": target})
            log.info("backlog eviction moved committed offset", extra={
                "group": group_id, "topic": topic, "partition": partition,
                "from": offset.offset, "to": target})
        for source, group, position in others:
            if position >= target:
                continue
            await source.advance(group, topic, partition, target)
            result.evicted.append({"group": group, "topic": topic, "partition": partition,
                                   "from": position, "to": target, "protocol": "rocketmq"})
            log.info("backlog eviction moved rocketmq offset", extra={
                "group": group, "topic": topic, "partition": partition, "from": position,
                "to": target})

    def _release(self, key: tuple[str, int]) -> None:
        over = self._over.pop(key, None)
        if over is not None:
            over.released.set()
            log.info("backlog back within quota", extra={"topic": key[0],
                                                         "partition": key[1]})

    async def _ledger_spans(self, topic: str, partition: int, plog: Any,
                            live_ledgers: set[int]) -> list[LedgerSpan]:
        starts: list[tuple[int, int]] = []  # (base offset, size) of the non-empty ledgers
        for ledger in self._topics.partition_ledgers(topic, partition):
            if ledger.entries == 0:
                continue
            live_ledgers.add(ledger.ledger_id)
            base = self._ledger_bases.get(ledger.ledger_id)
            if base is None:
                header = await plog.read_header(Position(ledger.ledger_id, 0))
                base = self._ledger_bases[ledger.ledger_id] = header.base_offset
            starts.append((base, ledger.size))
        end = plog.high_watermark
        return [LedgerSpan(start, starts[i + 1][0] if i + 1 < len(starts) else end, size)
                for i, (start, size) in enumerate(starts)]

    async def _timestamp_at(self, plog: Any, offset: int) -> int:
        """The timestamp of the batch holding `offset` (its first record's, or the broker's
        append time for LogAppendTime batches)."""
        batches = await plog.read(offset, 1)
        if not batches:
            return self._now_ms()
        header = parse_header(batches[0])
        return header.max_timestamp if header.timestamp_type == 1 else header.base_timestamp
