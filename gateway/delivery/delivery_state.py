"""Per-record delivery state of one (group, topic, partition): the pure logic of the engine.

Kafka share groups (KIP-932) and RocketMQ 5's SimpleConsumer both hand the records of one
partition to many consumers, one record at a time: a record is *acquired* by a consumer until
a deadline (Kafka's acquisition lock, RocketMQ's invisible duration), then *acknowledged*
(accept), *released* for redelivery, or *archived* (rejected, or delivered too often).

`DeliveryPartition` holds that state: the start offset (every record below it is done), the
end offset (every record from it on has never been delivered) and, for each offset in between,
its `InFlight` state and delivery count.  Its methods take the current time as an argument
(milliseconds on a wall clock, since deadlines are persisted and read by the next owner) and
change the state; `take_delta` hands out what changed since the last call, for the caller to
persist before it reveals the change to a client, and `snapshot` / `from_snapshot` /
`apply_delta` turn the state into plain JSON-able data and back.

This module must never do I/O, read a clock, import Trio, or know a wire protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

FORMAT_VERSION: Final = 1


class RecordState(IntEnum):
    """A record's state; the numbers are Kafka's persisted ones (ShareSnapshotValue.State)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """Kafka's acknowledge types (ShareAcknowledge's AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AckError(IntEnum):
    """Why an acknowledgement was refused (the protocol fronts map these to wire codes)."""

    NONE = 0
    INVALID_RECORD_STATE = 1  # not acquired by this holder, or already done
    INVALID_REQUEST = 2  # malformed: last < first, wrong number of types, unknown type


DONE_STATES: Final = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """The knobs of one group (Kafka: share.record.lock.duration.ms, share.delivery.count.limit,
    group.share.partition.max.record.locks)."""

    lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_in_flight: int = 2_000


@dataclass(slots=True)
class InFlight:
    """One record between the start and end offsets."""

    state: RecordState
    delivery_count: int
    holder: str | None = None  # who acquired it (ACQUIRED only)
    deadline_ms: int = 0  # when the acquisition lock expires (ACQUIRED only)

    def key(self) -> tuple[int, int, str | None, int]:
        return (int(self.state), self.delivery_count, self.holder, self.deadline_ms)


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets first..last (inclusive) acquired with this delivery count."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """Acknowledge first..last: one type for all, or one per offset.

    `delivery_count`, when given, must match every record's (RocketMQ's receipt handles name
    one delivery; an old handle must not settle a redelivery)."""

    first: int
    last: int
    types: tuple[int, ...]
    delivery_count: int | None = None


@dataclass(slots=True)
class AckResult:
    error: AckError = AckError.NONE
    message: str | None = None
    # offsets archived because they reached the delivery-count limit (dead-letter candidates)
    exhausted: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DeliveryStats:
    """Counters for metrics; never persisted."""

    acquired: int = 0
    redelivered: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    lock_expiries: int = 0
    archived_by_limit: int = 0


class DeliveryPartition:
    """The delivery state of one (group, topic, partition); see the module docstring."""

    def __init__(self, start_offset: int, settings: DeliverySettings | None = None) -> None:
        if start_offset < 0:
            raise ValueError("start offset must be >= 0")
        self.settings = settings or DeliverySettings()
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}
        self.stats = DeliveryStats()
        self._dirty: set[int] = set()
        self._bounds_dirty = True  # a new partition's offsets are news too

    # ---- queries ------------------------------------------------------------------------
    def in_flight(self) -> int:
        """Records neither acknowledged nor archived between start and end."""
        return sum(1 for r in self.records.values() if r.state not in DONE_STATES)

    def count(self, state: RecordState) -> int:
        return sum(1 for r in self.records.values() if r.state == state)

    def state_of(self, offset: int) -> InFlight:
        """The state of any offset (below start: acknowledged; from end on: never delivered)."""
        if offset < self.start_offset:
            return InFlight(RecordState.ACKNOWLEDGED, 0)
        if offset >= self.end_offset:
            return InFlight(RecordState.AVAILABLE, 0)
        return self.records[offset]

    def next_deadline(self) -> int | None:
        """The earliest acquisition-lock deadline, or None when nothing is acquired."""
        deadlines = [
            r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED
        ]
        return min(deadlines) if deadlines else None

    def has_available(self, fetchable_end: int) -> bool:
        """Could `acquire` hand out something now (ignoring locks that have yet to expire)?"""
        if any(r.state == RecordState.AVAILABLE for r in self.records.values()):
            return True
        return (
            self.end_offset < fetchable_end
            and self.end_offset - self.start_offset < self.settings.max_in_flight
        )

    def held_by(self, holder: str) -> list[int]:
        return sorted(
            o
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED and r.holder == holder
        )

    # ---- changes ------------------------------------------------------------------------
    def acquire(
        self,
        holder: str,
        max_records: int,
        now_ms: int,
        fetchable_end: int,
        lock_ms: int | None = None,
    ) -> list[AcquiredRange]:
        """Acquire up to `max_records` records for `holder`: redeliveries first (in offset
        order), then never-delivered offsets below `fetchable_end`; every acquired record's
        delivery count goes up by one.  Expired locks are let go first."""
        self.expire(now_ms)
        deadline = now_ms + (self.settings.lock_duration_ms if lock_ms is None else lock_ms)
        budget = max(0, max_records)
        taken: list[tuple[int, int]] = []
        if budget:
            for offset in sorted(
                o for o, r in self.records.items() if r.state == RecordState.AVAILABLE
            ):
                if budget == 0:
                    break
                record = self.records[offset]
                if record.delivery_count >= self.settings.delivery_count_limit:
                    self._archive(offset, exhausted=True)  # the limit was lowered meanwhile
                    continue
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.holder, record.deadline_ms = holder, deadline
                self._dirty.add(offset)
                self.stats.redelivered += 1
                taken.append((offset, record.delivery_count))
                budget -= 1
        room = self.settings.max_in_flight - (self.end_offset - self.start_offset)
        fresh = max(0, min(budget, fetchable_end - self.end_offset, room))
        for offset in range(self.end_offset, self.end_offset + fresh):
            self.records[offset] = InFlight(RecordState.ACQUIRED, 1, holder, deadline)
            self._dirty.add(offset)
            taken.append((offset, 1))
        if fresh:
            self.end_offset += fresh
            self._bounds_dirty = True
        self.stats.acquired += len(taken)
        self._advance_start()
        return _ranges(taken)

    def acknowledge(
        self,
        holder: str | None,
        batches: Iterable[AckBatch],
        now_ms: int,
        lock_ms: int | None = None,
    ) -> AckResult:
        """Apply acknowledgements, all or none: every offset must be ACQUIRED by `holder`
        (None: by anyone, as RocketMQ's receipt handles allow).  RENEW extends the lock to
        now + `lock_ms` (default: the group's lock duration)."""
        self.expire(now_ms)
        plan: list[tuple[int, AckType]] = []
        seen: set[int] = set()
        for batch in batches:
            problem = self._check_batch(holder, batch, seen)
            if problem is not None:
                return problem
            for i, offset in enumerate(range(batch.first, batch.last + 1)):
                kind = AckType(batch.types[0] if len(batch.types) == 1 else batch.types[i])
                plan.append((offset, kind))
        result = AckResult()
        renew_deadline = now_ms + (self.settings.lock_duration_ms if lock_ms is None else lock_ms)
        for offset, kind in plan:
            record = self.records[offset]
            self._dirty.add(offset)
            if kind == AckType.ACCEPT:
                record.state, record.holder, record.deadline_ms = RecordState.ACKNOWLEDGED, None, 0
                self.stats.accepted += 1
            elif kind == AckType.RELEASE:
                self.stats.released += 1
                if self._make_available(offset):
                    result.exhausted.append(offset)
            elif kind == AckType.RENEW:
                record.deadline_ms = renew_deadline
            else:  # REJECT, GAP
                if kind == AckType.REJECT:
                    self.stats.rejected += 1
                self._archive(offset, exhausted=False)
        self._advance_start()
        return result

    def _check_batch(self, holder: str | None, batch: AckBatch, seen: set[int]) -> AckResult | None:
        if batch.last < batch.first or not batch.types:
            return AckResult(AckError.INVALID_REQUEST, "empty or inverted batch")
        size = batch.last - batch.first + 1
        if len(batch.types) not in (1, size):
            return AckResult(AckError.INVALID_REQUEST, "acknowledge types do not match offsets")
        if any(t not in AckType._value2member_map_ for t in batch.types):
            return AckResult(AckError.INVALID_REQUEST, "unknown acknowledge type")
        if batch.first < self.start_offset or batch.last >= self.end_offset:
            return AckResult(
                AckError.INVALID_RECORD_STATE,
                f"offsets {batch.first}-{batch.last} are not in flight",
            )
        for offset in range(batch.first, batch.last + 1):
            record = self.records[offset]
            if (
                offset in seen
                or record.state != RecordState.ACQUIRED
                or (holder is not None and record.holder != holder)
                or (
                    batch.delivery_count is not None
                    and record.delivery_count != batch.delivery_count
                )
            ):
                return AckResult(
                    AckError.INVALID_RECORD_STATE, f"offset {offset} is not acquired by this member"
                )
            seen.add(offset)
        return None

    def expire(self, now_ms: int) -> list[int]:
        """Let go of every acquisition whose lock ran out; the offsets that expired."""
        expired = sorted(
            o
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED and r.deadline_ms <= now_ms
        )
        for offset in expired:
            self.stats.lock_expiries += 1
            self._make_available(offset)
        if expired:
            self._advance_start()
        return expired

    def release_holder(self, holder: str) -> list[int]:
        """Make everything `holder` acquired available again (it left or closed its session)."""
        offsets = self.held_by(holder)
        for offset in offsets:
            self._make_available(offset)
        if offsets:
            self._advance_start()
        return offsets

    def give_back(self, holder: str, ranges: Iterable[AcquiredRange]) -> list[int]:
        """Undo an acquisition that never reached `holder` (its records could not be read, or
        not copied to the dead-letter topic): each record of `ranges` that `holder` still holds
        at the range's delivery count is available again at once, with that delivery not
        counted.  Kafka acquires only records it has already read, so a failed read costs no
        delivery there either; and a record past the limit that goes back uncounted is copied
        on its next acquisition instead of archived uncopied.  Never-delivered records at the
        end are handed back whole: the end offset moves back over them.  The offsets."""
        returned: list[int] = []
        for r in ranges:
            for offset in range(r.first, r.last + 1):
                record = self.records.get(offset)
                if (record is None or record.state != RecordState.ACQUIRED
                        or record.holder != holder or record.delivery_count != r.delivery_count):
                    continue  # acknowledged, expired or taken again meanwhile: leave it
                record.state, record.holder, record.deadline_ms = RecordState.AVAILABLE, None, 0
                record.delivery_count -= 1
                self._dirty.add(offset)
                returned.append(offset)
        while self.end_offset > self.start_offset:
            last = self.records[self.end_offset - 1]
            if last.state != RecordState.AVAILABLE or last.delivery_count:
                break
            del self.records[self.end_offset - 1]
            self.end_offset -= 1
            self._bounds_dirty = True
        self.stats.acquired -= len(returned)
        return returned

    def reset_start(self, offset: int) -> None:
        """Start over at `offset` with nothing in flight (AlterShareGroupOffsets; also a log
        start moving past records that were never done)."""
        if offset < 0:
            raise ValueError("start offset must be >= 0")
        self.records.clear()
        self._dirty.clear()
        self.start_offset = self.end_offset = offset
        self._bounds_dirty = True

    def skip_before(self, log_start: int) -> None:
        """Records below the log's start are gone: forget them, keep the rest."""
        if log_start <= self.start_offset:
            return
        if log_start >= self.end_offset:
            self.reset_start(log_start)
            return
        for offset in range(self.start_offset, log_start):
            self.records.pop(offset, None)
        self.start_offset = log_start
        self._bounds_dirty = True
        self._advance_start()

    def _make_available(self, offset: int) -> bool:
        """ACQUIRED -> AVAILABLE, or ARCHIVED when it was delivered often enough (True)."""
        record = self.records[offset]
        if record.delivery_count >= self.settings.delivery_count_limit:
            self._archive(offset, exhausted=True)
            return True
        record.state, record.holder, record.deadline_ms = RecordState.AVAILABLE, None, 0
        self._dirty.add(offset)
        return False

    def _archive(self, offset: int, *, exhausted: bool) -> None:
        record = self.records[offset]
        record.state, record.holder, record.deadline_ms = RecordState.ARCHIVED, None, 0
        self._dirty.add(offset)
        if exhausted:
            self.stats.archived_by_limit += 1

    def _advance_start(self) -> None:
        start = self.start_offset
        while start < self.end_offset and self.records[start].state in DONE_STATES:
            del self.records[start]
            start += 1
        if start != self.start_offset:
            self.start_offset = start
            self._bounds_dirty = True

    # ---- persistence form ---------------------------------------------------------------
    def take_delta(self) -> dict[str, Any] | None:
        """What changed since the last call, as a JSON-able delta (None: nothing)."""
        dirty = sorted(o for o in self._dirty if o >= self.start_offset and o in self.records)
        self._dirty.clear()
        if not dirty and not self._bounds_dirty:
            return None
        self._bounds_dirty = False
        return {
            "start": self.start_offset,
            "end": self.end_offset,
            "records": _encode_runs((o, self.records[o]) for o in dirty),
        }

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data.  Pending changes stay pending: a concurrent
        caller's `take_delta` must still see (and persist) its own changes."""
        return {
            "start": self.start_offset,
            "end": self.end_offset,
            "records": _encode_runs(sorted(self.records.items())),
        }

    @classmethod
    def from_snapshot(
        cls, data: dict[str, Any], settings: DeliverySettings | None = None
    ) -> DeliveryPartition:
        partition = cls(int(data["start"]), settings)
        partition.apply_delta(data)
        partition._dirty.clear()
        partition._bounds_dirty = False
        return partition

    def apply_delta(self, delta: dict[str, Any]) -> None:
        """Replay a delta written by `take_delta` (or a snapshot) onto this state."""
        start, end = int(delta["start"]), int(delta["end"])
        if not 0 <= start <= end:
            raise ValueError(f"bad delta bounds {start}..{end}")
        for offset in [o for o in self.records if o < start or o >= end]:
            del self.records[offset]
        for offset in range(max(self.end_offset, start), end):
            self.records[offset] = InFlight(RecordState.AVAILABLE, 0)
        self.start_offset, self.end_offset = start, end
        for offset, record in _decode_runs(delta.get("records") or []):
            if start <= offset < end:
                self.records[offset] = record
        for offset in range(start, end):  # an older delta's start may lag a newer snapshot's
            self.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
        self._advance_start()


def _ranges(taken: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for offset, count in sorted(taken):
        if out and out[-1].last == offset - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRange(out[-1].first, offset, count)
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out


def _encode_runs(items: Iterable[tuple[int, InFlight]]) -> list[list[Any]]:
    """[first, last, state, delivery count, holder, deadline] for each run of equal records."""
    runs: list[list[Any]] = []
    for offset, record in items:
        key = record.key()
        if runs and runs[-1][1] == offset - 1 and tuple(runs[-1][2:]) == key:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset, *key])
    return runs


def _decode_runs(runs: list[list[Any]]) -> Iterator[tuple[int, InFlight]]:
    for first, last, state, count, holder, deadline in runs:
        if last < first or last - first > 10_000_000:
            raise ValueError(f"bad run {first}..{last}")
        for offset in range(int(first), int(last) + 1):
            yield offset, InFlight(RecordState(int(state)), int(count), holder, int(deadline))
