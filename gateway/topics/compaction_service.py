"""Background log compaction for the partitions this broker has open (and so owns).

`run` wakes every `interval_s` and gives each open partition of a topic with
cleanup.policy containing "compact" one pass (gateway/topics/compactor.py decides whether the
dirty ratio or max.compaction.lag.ms calls for work); passes run one at a time, reads paced to
`max_bytes_per_s` so compaction never starves produce and fetch. `compact_topic` forces a
pass on every partition of a topic now (admin API, `ledgerwire admin topics compact`).
Each partition's progress and last result are kept for the admin API and the metrics.

A partition is compacted only through its open PartitionLog, which only the owner has: in a
cluster, only the owner compacts. This module must never open a partition for compaction
(that would take ownership), and a failed pass is one WARNING line, never a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.topics.compactor import (
    CompactionResult,
    CompactionSettings,
    Pacer,
    Progress,
    compact_partition,
)
from ledger_backend.client.errors import LedgerError
from ledger_backend.managed_ledger import ManagedLedgerError
from ledger_backend.metadata.store import MetadataError
from protocols.kafka.errors import KafkaProtocolError

log = logging.getLogger("ledgerwire.compaction")


@dataclass
class PartitionCompaction:
    """What the admin API shows of one partition's compaction."""

    running: bool = False
    progress: Progress = field(default_factory=Progress)
    last: CompactionResult | None = None
    last_error: str | None = None
    passes: int = 0
    bytes_in_total: int = 0
    bytes_out_total: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"running": self.running, "progress": self.progress.to_json(),
                "last": None if self.last is None else self.last.to_json(),
                "last_error": self.last_error, "passes": self.passes}


class CompactionService:
    def __init__(self, topics: Any, *, interval_s: float = 30.0,
                 max_bytes_per_s: float | None = 64 << 20) -> None:
        self._topics = topics  # gateway.topics.topic_service.TopicService
        self.interval_s = interval_s
        self.max_bytes_per_s = max_bytes_per_s
        self._state: dict[tuple[str, int], PartitionCompaction] = {}
        self._lock = trio.Lock()  # one pass at a time on this broker

    def settings(self, topic: str) -> CompactionSettings:
        info = self._topics.topics().get(topic)
        return CompactionSettings.from_configs(info.configs if info is not None else {})

    def state(self, topic: str, partition: int) -> PartitionCompaction:
        return self._state.setdefault((topic, partition), PartitionCompaction())

    def forget_topic(self, topic: str) -> None:
        """Drop the state of a topic that is gone (deleted here or elsewhere): a churn of
        topics grew it without bound, and a topic created again under the name showed the
        old one's passes."""
        for key in [k for k in self._state if k[0] == topic]:
            del self._state[key]

    def states(self) -> dict[tuple[str, int], PartitionCompaction]:
        return dict(self._state)

    async def run(self) -> None:
        """Passes forever (start it in the broker's background nursery)."""
        while True:
            await trio.sleep(self.interval_s)
            try:
                await self.run_once()
            except Exception:  # a background pass must never take the broker down
                log.warning("compaction pass failed", exc_info=True)

    async def run_once(self) -> list[CompactionResult]:
        results = []
        for (topic, partition), plog in sorted(self._topics.open_partitions().items()):
            if not self.settings(topic).compact or plog.failed or plog.closed:
                continue
            result = await self._pass(topic, partition, plog, force=False)
            if result is not None:
                results.append(result)
        return results

    async def compact_topic(self, topic: str) -> list[dict[str, Any]]:
        """Force a pass on every partition of `topic` open here; each one's result."""
        logs = await self._topics.logs_here(topic)
        if not self.settings(topic).compact:
            raise KafkaProtocolError(f"topic {topic} is not compacted (cleanup.policy)")
        out: list[dict[str, Any]] = []
        for p, plog in logs:
            if plog is None:
                out.append({"partition": p, "skipped": "not open on this broker"})
                continue
            result = await self._pass(topic, p, plog, force=True)
            state = self.state(topic, p)
            out.append({"partition": p, **(result.to_json() if result else
                                           {"error": state.last_error})})
        return out

    def gauges(self, topic: str, partition: int, plog: Any) -> dict[str, float] | None:
        """Metric values of a compacted partition (None for other topics)."""
        if not self.settings(topic).compact:
            return None
        state = self.state(topic, partition)
        last = state.last
        return {"bytes_before": last.bytes_before if last else 0,
                "bytes_after": last.bytes_after if last else 0,
                "keys": last.keys if last else 0,
                "finished_ms": last.finished_ms if last else 0,
                "dirty_ratio": last.dirty_ratio if last else 0.0,
                "lag": max(0, plog.high_watermark - plog.cleaned_through),
                "passes": state.passes}

    def status(self, topic: str) -> list[dict[str, Any]]:
        return [{"partition": p, **s.to_json()} for (t, p), s in sorted(self._state.items())
                if t == topic]

    async def _pass(self, topic: str, partition: int, plog: Any, *,
                    force: bool) -> CompactionResult | None:
        state = self.state(topic, partition)
        async with self._lock:
            state.running = True
            try:
                with plog.pinned():  # not unloaded as idle under the pass
                    result = await compact_partition(
                        plog, self.settings(topic), force=force,
                        pacer=Pacer(self.max_bytes_per_s), progress=state.progress)
            except (KafkaProtocolError, ManagedLedgerError, LedgerError, MetadataError,
                    OSError) as exc:  # expected faults: the next pass retries
                state.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("compaction of %s-%d failed: %s", topic, partition, state.last_error)
                return None
            except Exception as exc:  # a bug: say where, but keep the broker and the log up
                state.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("compaction of %s-%d failed", topic, partition, exc_info=True)
                return None
            finally:
                state.running = False
                state.progress.phase = "idle"
        state.last, state.last_error = result, None
        if result.ran:
            state.passes += 1
            state.bytes_in_total += result.bytes_before
            state.bytes_out_total += result.bytes_after
            log.info("compacted %s-%d: %d -> %d bytes, %d -> %d records, %d keys (%s)",
                     topic, partition, result.bytes_before, result.bytes_after,
                     result.records_before, result.records_after, result.keys, result.reason)
        return result
