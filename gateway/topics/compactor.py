"""One compaction pass over one Kafka partition log (cleanup.policy=compact), on ledgers.

How a pass goes (Kafka's LogCleaner rules, ledgerwire's storage):

1. The CLEANABLE range is the longest run of closed ledgers from the front of the list that
   (a) end below the last stable offset (no open transaction is touched), and (b) were last
   written (their successor's creation) at least min.compaction.lag.ms ago. The open ledger is
   never in it. Segment rollover is the managed ledger's (segment.bytes, segment.ms, and
   max.compaction.lag.ms bound the ledger age of compacted topics; see topic_service.py).
2. The pass runs when the dirty part (ledgers ending at or past the partition's cleaned_through
   checkpoint) is at least min.cleanable.dirty.ratio of the range, or its oldest ledger is
   older than max.compaction.lag.ms, or it is forced (admin).
3. Pass 1 reads the range and builds the latest offset per key (of the dirty ledgers only:
   the clean ones hold each key once already); pass 2 reads the whole range again and
   filters each batch (protocols/kafka/batch_compaction.py: the record rules). Decoding and
   re-encoding run in trio.to_thread; reads are paced to `max_bytes_per_s`.
4. Filtered ledgers are grouped into new ledgers of at most the segment size (small ones are
   merged, a ledger that lost nothing and does not fit a group stays as it is), the
   checkpoint (cleaned_through) is persisted, and the managed ledger swaps the groups in by
   one compare-and-set (ledger_backend/managed_ledger/ledger_swap.py: old ledgers go after the
   swap; a crash leaves either list, whole).
5. Tombstones and transaction markers of a ledger last written more than delete.retention.ms
   ago go (and the marker only once no record of its transaction is left).

This module must never touch the open ledger, write the log any other way than through the
managed ledger's rewrite, or run on a partition this broker does not own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from ledger_backend.managed_ledger.types import Entry, LedgerInfo, Position
from protocols.kafka.batch_compaction import CompactionPlan
from protocols.kafka.record_batch import parse_header

log = logging.getLogger("ledgerwire.compaction")

LONG_MAX = 2**63 - 1
_CHUNK_ENTRIES = 256


@dataclass(frozen=True)
class CompactionSettings:
    """A topic's compaction configs (Kafka's names and defaults)."""

    compact: bool = False
    delete: bool = True
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> CompactionSettings:
        policy = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
        return cls(
            compact="compact" in policy,
            delete="delete" in policy,
            delete_retention_ms=int(configs.get("delete.retention.ms", 86_400_000)),
            min_compaction_lag_ms=int(configs.get("min.compaction.lag.ms", 0)),
            max_compaction_lag_ms=int(configs.get("max.compaction.lag.ms", LONG_MAX)),
            min_cleanable_dirty_ratio=float(configs.get("min.cleanable.dirty.ratio", 0.5)),
        )


@dataclass
class CompactionResult:
    """What one pass did (the admin API and the metrics show it)."""

    partition: str
    started_ms: int
    finished_ms: int = 0
    ran: bool = False
    reason: str = ""  # why it ran, or why not
    ledgers_in: int = 0
    ledgers_out: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_before: int = 0
    records_after: int = 0
    keys: int = 0  # keyed records left in the compacted range (one per key)
    tombstones_removed: int = 0
    aborted_removed: int = 0
    markers_removed: int = 0
    cleaned_through: int = 0
    dirty_ratio: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Progress:
    """Bytes read so far of the two passes over the cleanable range."""

    total_bytes: int = 0
    done_bytes: int = 0
    phase: str = "idle"

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "done_bytes": self.done_bytes,
                "total_bytes": self.total_bytes}


class Pacer:
    """Keeps reads at or under `bytes_per_s` (None: as fast as it goes)."""

    def __init__(self, bytes_per_s: float | None) -> None:
        self._rate = bytes_per_s
        self._start = time.monotonic()
        self._bytes = 0

    async def spent(self, nbytes: int) -> None:
        self._bytes += nbytes
        if self._rate is None or self._rate <= 0:
            await trio.lowlevel.checkpoint()
            return
        ahead = self._bytes / self._rate - (time.monotonic() - self._start)
        await trio.sleep(max(0.0, ahead))


@dataclass
class _Span:
    info: LedgerInfo
    first_offset: int
    end_offset: int  # one past its last offset
    expired: bool  # tombstones/markers of this ledger are past delete.retention.ms
    successor_id: int  # the ledger after it in the list
    outputs: list[tuple[Position, bytes]] = field(default_factory=list)
    changed: bool = False


async def compact_partition(plog: Any, settings: CompactionSettings, *, force: bool = False,
                            now_ms: int | None = None, pacer: Pacer | None = None,
                            progress: Progress | None = None,
                            segment_bytes: int | None = None) -> CompactionResult:
    """One pass over `plog` (a gateway.topics.partition_log.PartitionLog)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = CompactionResult(plog.name, now)
    pacer = pacer or Pacer(None)
    progress = progress or Progress()
    ml = plog.ledger
    spans = await _cleanable(plog, settings, now)
    if not spans:
        result.reason = "nothing cleanable"
        return _finish(result)
    total = sum(s.info.size for s in spans)
    dirty = [s for s in spans if s.end_offset > plog.cleaned_through]
    result.dirty_ratio = sum(s.info.size for s in dirty) / total if total else 0.0
    overdue = bool(dirty) and dirty[0].info.created_ms <= now - settings.max_compaction_lag_ms
    if force:
        result.reason = "forced"
    elif not dirty:
        result.reason = "no dirty ledgers"
        return _finish(result)
    elif overdue:
        result.reason = "max.compaction.lag.ms"
    elif result.dirty_ratio >= settings.min_cleanable_dirty_ratio:
        result.reason = "min.cleanable.dirty.ratio"
    else:
        result.reason = f"dirty ratio {result.dirty_ratio:.2f} below the minimum"
        return _finish(result)

    progress.total_bytes, progress.done_bytes = 2 * total, 0
    plan = CompactionPlan()
    progress.phase = "indexing keys"
    cleaned = plog.cleaned_through
    for span in spans:
        clean = span.end_offset <= cleaned  # compacted before: keys unique, not mapped again
        async for chunk in _chunks(ml, span.info, pacer, progress):
            datas = [e.data for e in chunk]
            await trio.to_thread.run_sync(_observe_all, plan, datas, clean)
    progress.phase = "filtering"
    for span in spans:
        async for chunk in _chunks(ml, span.info, pacer, progress):
            outs = await trio.to_thread.run_sync(_filter_all, plan, chunk, span.expired)
            for entry, out in zip(chunk, outs, strict=True):
                if out is not entry.data:
                    span.changed = True
                if out is not None:
                    span.outputs.append((entry.position, out))
    progress.phase = "swapping"
    limit = segment_bytes or ml.config.max_ledger_bytes
    runs = _group(spans, limit)
    result.ran = True
    stats = plan.stats
    result.keys = stats.keys_out
    result.records_before, result.records_after = stats.records_in, stats.records_out
    result.tombstones_removed = stats.tombstones_removed
    result.aborted_removed = stats.aborted_removed
    result.markers_removed = stats.markers_removed
    result.ledgers_in = len(spans)
    result.bytes_before = total
    cleaned_through = spans[-1].end_offset
    result.cleaned_through = cleaned_through
    await plog.record_cleaned_through(cleaned_through)
    if runs:
        rewrite = ml.rewrite()
        try:
            for run in runs:
                for span in run:
                    for position, data in span.outputs:
                        await rewrite.write(position, data)
                await rewrite.end_run([span.info.ledger_id for span in run])
            swapped = await rewrite.commit()
        except BaseException:
            with trio.CancelScope(shield=True):
                await rewrite.abort()
            raise
        plog.forget_rewritten(swapped, cleaned_through)
    listed = list(ml.ledgers)
    ids = [info.ledger_id for info in listed]
    stop = ids.index(spans[-1].successor_id) if spans[-1].successor_id in ids else len(ids)
    result.ledgers_out = stop
    result.bytes_after = sum(info.size for info in listed[:stop])
    progress.phase = "idle"
    return _finish(result)


def _finish(result: CompactionResult) -> CompactionResult:
    result.finished_ms = int(time.time() * 1000)
    return result


def _observe_all(plan: CompactionPlan, datas: list[bytes], clean: bool) -> None:
    for data in datas:
        plan.observe(data, clean=clean)


def _filter_all(plan: CompactionPlan, chunk: list[Entry], expired: bool) -> list[bytes | None]:
    return [plan.filter(e.data, expired=expired) for e in chunk]


async def _chunks(ml: Any, info: LedgerInfo, pacer: Pacer, progress: Progress) -> Any:
    position = Position(info.ledger_id, 0)
    read = 0
    while read < info.entries:
        chunk = await ml.read(position, min(_CHUNK_ENTRIES, info.entries - read))
        chunk = [e for e in chunk if e.position.ledger_id == info.ledger_id]
        if not chunk:
            return
        nbytes = sum(len(e.data) for e in chunk)
        progress.done_bytes += nbytes
        yield chunk
        await pacer.spent(nbytes)
        read += len(chunk)
        position = Position(info.ledger_id, chunk[-1].position.entry_id + 1)


async def _cleanable(plog: Any, settings: CompactionSettings, now: int) -> list[_Span]:
    ml = plog.ledger
    infos: list[LedgerInfo] = list(ml.ledgers)
    lso = plog.last_stable_offset
    spans: list[_Span] = []
    for index, info in enumerate(infos[:-1]):
        successor = infos[index + 1]
        if not info.closed or info.ledger_id == ml.current_ledger_id:
            break
        if successor.created_ms > now - settings.min_compaction_lag_ms:
            break  # written too recently
        if info.entries == 0:  # dropped by the rewrite
            previous_end = spans[-1].end_offset if spans else plog.log_start_offset
            spans.append(_Span(info, previous_end, previous_end, True, successor.ledger_id,
                               changed=True))
            continue
        first = parse_header(await ml.read_entry(Position(info.ledger_id, 0))).base_offset
        last = parse_header(
            await ml.read_entry(Position(info.ledger_id, info.entries - 1))).last_offset
        if last >= lso:
            break  # an open transaction (or the unstable tail) is in this ledger
        expired = successor.created_ms <= now - settings.delete_retention_ms
        spans.append(_Span(info, first, last + 1, expired, successor.ledger_id))
    return spans


def _group(spans: list[_Span], limit: int) -> list[list[_Span]]:
    """Runs of consecutive ledgers to rewrite, each fitting `limit` bytes of output."""
    runs: list[list[_Span]] = []
    current: list[_Span] = []
    size = 0

    def close() -> None:
        nonlocal current, size
        if current and (len(current) > 1 or current[0].changed):
            runs.append(current)
        current, size = [], 0

    for span in spans:
        out = sum(len(d) for _, d in span.outputs)
        if current and size + out > limit:
            close()
        if not current and not span.changed and out >= limit / 2:
            continue  # a full ledger that lost nothing: leave it where it is
        current.append(span)
        size += out
    close()
    return runs


def ledger_age_limit_s(settings: CompactionSettings, segment_age_s: float) -> float:
    """The rollover age of a compacted topic's ledgers: segment.ms, and max.compaction.lag.ms
    (a record cannot be compacted while its ledger is open)."""
    if settings.compact and settings.max_compaction_lag_ms < LONG_MAX:
        return max(0.001, min(segment_age_s, settings.max_compaction_lag_ms / 1000))
    return segment_age_s

