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

Durability design: the state is rebuilt from the log, which is the only truth.  A *snapshot*
(this state plus the offset it covers, `ProducerSnapshot`) is written now and then by the
partition log into its metadata node, only at a moment when every assigned offset is durable, so
a snapshot never describes a batch that a crash could lose.  On load the partition log restores
the snapshot and replays the batch headers between its offset and the high watermark
(`replay`, no checks: the log is already what it is).  A snapshot beyond the recovered high
watermark, or of an unknown format, is ignored and the whole retained log is replayed instead.

This module is pure state: no I/O, no Trio.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from protocols.kafka.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from protocols.kafka.record_batch import MAX_SEQUENCE, BatchHeader

BATCHES_TO_RETAIN = 5
SNAPSHOT_FORMAT_VERSION = 1
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


class ProducerStateManager:
    """All idempotent producers of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

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

    def replay(self, header: BatchHeader, now_ms: int) -> None:
        """Rebuild from a stored batch (its base offset is already patched); no rule checks."""
        if header.is_control:
            # Transaction markers bump nothing here until transactions exist; keep the epoch.
            entry = self.producers.get(header.producer_id)
            if entry is not None and header.producer_epoch > entry.epoch:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            return
        self.update(header, header.base_offset, now_ms)

    def expire(self, now_ms: int, max_idle_ms: int) -> int:
        """Forget producers idle longer than `max_idle_ms` (producer.id.expiration.ms)."""
        stale = [pid for pid, e in self.producers.items()
                 if now_ms - e.last_update_ms > max_idle_ms]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    def truncate_before(self, offset: int) -> None:
        """Drop batch metadata below `offset` (records deleted); producers left empty go."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            while entry.batches and entry.batches[0].last_offset < offset:
                entry.batches.popleft()
            if not entry.batches:
                del self.producers[pid]

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
              for b in list(e.batches)[-keep:]]]
            for e in self.producers.values()
        ]
        return {"format": SNAPSHOT_FORMAT_VERSION, "offset": covers_offset, "producers": producers}

    @classmethod
    def restore(cls, doc: object) -> tuple[ProducerStateManager, int] | None:
        """(state, covered offset) from a snapshot doc, or None if it is unusable."""
        if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT_VERSION:
            return None
        try:
            manager = cls()
            for pid, epoch, last_update_ms, batches in doc["producers"]:
                entry = ProducerEntry(int(pid), int(epoch), last_update_ms=int(last_update_ms))
                for b in batches:
                    entry.batches.append(BatchMetadata(*(int(x) for x in b)))
                manager.producers[entry.producer_id] = entry
            return manager, int(doc["offset"])
        except (KeyError, TypeError, ValueError):
            return None
