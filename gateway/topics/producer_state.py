"""Idempotent-producer state of one partition: producer id -> epoch and its last 5 batches.

The rules are Kafka's (ProducerStateManager / ProducerAppendInfo), checked for every batch that
carries a producer id, in the order offsets are assigned:

- a batch whose epoch and sequence range equal one of the producer's last 5 batches is a retry:
  it is not appended again, and the caller answers with that batch's original base offset;
- an epoch older than the producer's current epoch is fenced: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0 (unless the producer was unknown);
- within an epoch the first sequence must follow the last one (sequences wrap from int32 max to
  0), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer id with no state here (new, or its state expired/trimmed) may start at any sequence.

Transactions (Kafka's ProducerStateManager again): a transactional batch opens the producer's
transaction at its first offset unless one is open; a non-transactional batch while one is open
is INVALID_TXN_STATE.  A COMMIT/ABORT marker (`apply_marker`, written only by the transaction
coordinator) closes it: an ABORT adds (producer id, first offset, marker offset) to the aborted
index that read_committed fetches get.  The *first unstable offset* is the first offset of the
oldest transaction still open, or still closing (its marker is assigned an offset but not yet
durable): the partition's last stable offset is min(that, high watermark).  A marker with an
older epoch than the producer's is INVALID_PRODUCER_EPOCH; one from an older coordinator epoch is
TRANSACTION_COORDINATOR_FENCED.

Durability design: the state is rebuilt from the log, which is the only truth.  A *snapshot*
(this state plus the offset it covers, `ProducerSnapshot`) is written now and then by the
partition log into its metadata node, only at a moment when every assigned offset is durable, so
a snapshot never describes a batch that a crash could lose.  On load the partition log restores
the snapshot and replays the batch headers between its offset and the high watermark
(`replay`, no checks: the log is already what it is).  A snapshot beyond the recovered high
watermark, or of an unknown format, is ignored and the whole retained log is replayed instead.

The snapshot (format 2) carries each producer's open transaction and the aborted index (entries
whose marker is below the log start are dropped).  This module is pure state: no I/O, no Trio.
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from dataclasses import dataclass, field

from protocols.kafka.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    MAX_SEQUENCE,
    BatchHeader,
    decode_records,
    parse_control_record,
)

BATCHES_TO_RETAIN = 5
SNAPSHOT_FORMAT_VERSION = 2
_READABLE_SNAPSHOT_FORMATS = (1, 2)
# A metadata node (ZooKeeper) holds about 1 MB: past this, snapshots keep one batch per producer.
MAX_SNAPSHOT_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What dedup needs to remember of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_update_ms: int = 0
    txn_first_offset: int = -1  # first offset of the open transaction, -1 when none
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


def sequence_ahead(last_seq: int, first_seq: int) -> bool:
    """True if `first_seq` lies beyond the next expected sequence (a gap, in wrapping int32
    sequence space, by less than half of it): earlier batches may still be on their way."""
    gap = (first_seq - last_seq - 1) % (MAX_SEQUENCE + 1)
    return 0 < gap < (MAX_SEQUENCE + 1) // 2


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its data lies in [first_offset, last_offset] (the marker).

    `stable_after` is the last stable offset once its marker was written (Kafka's
    AbortedTxn.lastStableOffset): every transaction aborted later starts at or after it, so a
    search for transactions starting below some offset can stop at the first entry whose
    `stable_after` reaches that offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    stable_after: int


class ProducerStateManager:
    """All idempotent and transactional producers of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # (marker offset, first offset) of transactions whose marker may not be durable yet
        self._closing: list[tuple[int, int]] = []
        self.aborted: list[AbortedTxn] = []  # in marker (last_offset) order
        self._aborted_lasts: list[int] = []  # their last offsets, for bisection

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Apply the rules to a client batch: its original metadata if it is a retry, None if it
        may be appended; OutOfOrderSequenceError / InvalidProducerEpochError otherwise."""
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        epoch, first_seq = header.producer_epoch, header.base_sequence
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {epoch} is older than {entry.epoch}"
            )
        if entry.txn_first_offset >= 0 and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} sent a non-transactional batch inside its "
                "open transaction"
            )
        if epoch != entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} new epoch {epoch} starts at sequence "
                    f"{first_seq}, expected 0"
                )
        elif not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} epoch {epoch}: sequence {first_seq} does not "
                f"follow {entry.last_seq}"
            )
        return None

    def awaits_earlier_batches(self, header: BatchHeader) -> bool:
        """True if the batch would be OUT_OF_ORDER only because it is ahead of the producer's
        last sequence here (same epoch, not a retry, a gap before it): the partition log gives
        earlier batches in flight a moment to arrive before judging it (`check`)."""
        if header.producer_id < 0 or header.is_control:
            return False
        entry = self.producers.get(header.producer_id)
        if entry is None or not entry.batches or header.producer_epoch != entry.epoch:
            return False
        # a retry of a remembered batch lies behind the last sequence, never ahead of it
        return sequence_ahead(entry.last_seq, header.base_sequence)

    def update(self, header: BatchHeader, first_offset: int, now_ms: int) -> None:
        """Record an appended batch (after `check`, or while replaying the log)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self.producers[header.producer_id] = entry
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset,
                first_offset + header.last_offset_delta, header.max_timestamp,
            )
        )
        entry.last_update_ms = now_ms
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self.open_txns[header.producer_id] = first_offset

    # --- transaction markers ---------------------------------------------------------------------

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Kafka's rules for a COMMIT/ABORT marker about to be appended."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {epoch} is older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker from coordinator epoch {coordinator_epoch} < {entry.coordinator_epoch}"
            )

    def apply_marker(self, producer_id: int, epoch: int, control_type: int,
                     coordinator_epoch: int, marker_offset: int, now_ms: int) -> None:
        """Close the producer's open transaction with the marker at `marker_offset`."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        if epoch > entry.epoch:  # a fencing marker: the old epoch's sequences are void
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.last_update_ms = now_ms
        first = entry.txn_first_offset
        entry.txn_first_offset = -1
        self.open_txns.pop(producer_id, None)
        if first < 0:
            return  # nothing of this transaction reached this partition
        self._closing.append((marker_offset, first))
        if control_type == CONTROL_ABORT:
            stable_after = min(self.open_txns.values(), default=marker_offset + 1)
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset,
                                           min(stable_after, marker_offset + 1)))
            self._aborted_lasts.append(marker_offset)

    def first_unstable_offset(self, high_watermark: int) -> int:
        """The last stable offset: min(first offset of an open or closing transaction, hw)."""
        if self._closing:
            self._closing = [c for c in self._closing if c[0] >= high_watermark]
        lso = high_watermark
        for first in self.open_txns.values():
            lso = min(lso, first)
        for _marker, first in self._closing:
            lso = min(lso, first)
        return lso

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [start, end): what a fetch of that range needs."""
        found: list[AbortedTxn] = []
        for i in range(bisect.bisect_left(self._aborted_lasts, start), len(self.aborted)):
            aborted = self.aborted[i]
            if aborted.first_offset < end:
                found.append(aborted)
            if aborted.stable_after >= end:
                break
        return found

    def replay(self, header: BatchHeader, now_ms: int, data: bytes | None = None) -> None:
        """Rebuild from a stored batch (its base offset is already patched); no rule checks.

        A control batch needs its bytes (`data`): the marker type is in its one record."""
        if header.is_control:
            control_type = CONTROL_ABORT
            coordinator_epoch = -1
            if data is not None:
                records = decode_records(data)
                if records:
                    control = parse_control_record(records[0])
                    control_type = control.control_type
                    coordinator_epoch = control.coordinator_epoch
            self.apply_marker(header.producer_id, header.producer_epoch, control_type,
                              coordinator_epoch, header.base_offset, now_ms)
            return
        self.update(header, header.base_offset, now_ms)

    def expire(self, now_ms: int, max_idle_ms: int) -> int:
        """Forget producers idle longer than `max_idle_ms` (producer.id.expiration.ms)."""
        stale = [pid for pid, e in self.producers.items()
                 if now_ms - e.last_update_ms > max_idle_ms and e.txn_first_offset < 0]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    def truncate_before(self, offset: int) -> None:
        """Drop batch metadata below `offset` (records deleted); producers left empty go."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            while entry.batches and entry.batches[0].last_offset < offset:
                entry.batches.popleft()
            if not entry.batches and entry.txn_first_offset < 0:
                del self.producers[pid]
        self._set_aborted([a for a in self.aborted if a.last_offset >= offset])

    def _set_aborted(self, aborted: list[AbortedTxn]) -> None:
        self.aborted = aborted
        self._aborted_lasts = [a.last_offset for a in aborted]

    # --- snapshots -------------------------------------------------------------------------------

    def snapshot(self, covers_offset: int) -> dict[str, object]:
        """A JSON-able snapshot of the state after every batch below `covers_offset`."""
        doc = self._snapshot_doc(covers_offset, BATCHES_TO_RETAIN)
        if len(json.dumps(doc)) > MAX_SNAPSHOT_BYTES:
            doc = self._snapshot_doc(covers_offset, 1)
        return doc

    def _snapshot_doc(self, covers_offset: int, keep: int) -> dict[str, object]:
        producers = [
            [e.producer_id, e.epoch, e.last_update_ms,
             [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
              for b in list(e.batches)[-keep:]],
             e.txn_first_offset, e.coordinator_epoch]
            for e in self.producers.values()
        ]
        aborted = [[a.producer_id, a.first_offset, a.last_offset, a.stable_after]
                   for a in self.aborted]
        return {"format": SNAPSHOT_FORMAT_VERSION, "offset": covers_offset, "producers": producers,
                "aborted": aborted}

    @classmethod
    def restore(cls, doc: object) -> tuple[ProducerStateManager, int] | None:
        """(state, covered offset) from a snapshot doc, or None if it is unusable."""
        if not isinstance(doc, dict) or doc.get("format") not in _READABLE_SNAPSHOT_FORMATS:
            return None
        try:
            manager = cls()
            for row in doc["producers"]:
                pid, epoch, last_update_ms, batches = row[:4]
                entry = ProducerEntry(int(pid), int(epoch), last_update_ms=int(last_update_ms))
                for b in batches:
                    entry.batches.append(BatchMetadata(*(int(x) for x in b)))
                if len(row) >= 6:
                    entry.txn_first_offset, entry.coordinator_epoch = int(row[4]), int(row[5])
                    if entry.txn_first_offset >= 0:
                        manager.open_txns[entry.producer_id] = entry.txn_first_offset
                manager.producers[entry.producer_id] = entry
            manager._set_aborted([AbortedTxn(*(int(x) for x in row))
                                  for row in doc.get("aborted") or []])
            return manager, int(doc["offset"])
        except (KeyError, TypeError, ValueError):
            return None
