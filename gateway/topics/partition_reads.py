"""Reading stored batches of a partition log from its managed ledger (the non-cached path).

`read_stored` finds the entry holding an offset (a hint left by the previous sequential read,
else the sparse offset index), then reads entries forward up to the high watermark and the
byte budget, always returning at least one batch.  It leaves a hint for the offset after the
last batch it returned, so a consumer reading on needs no index lookup.  An entry that went
while it looked (InvalidPositionError) is OFFSET_OUT_OF_RANGE when the log start has moved past
the offset (trimmed); otherwise a compaction swapped the ledgers, and it reads once more on the
new list.

This module must never decode records, write anything, or read past the high watermark.
"""

from __future__ import annotations

from gateway.topics.stored_log import StoredLog
from ledger_backend.managed_ledger.types import InvalidPositionError, Position
from protocols.kafka.errors import OffsetOutOfRangeError
from protocols.kafka.record_batch import parse_header

MAX_READ_HINTS = 256


async def read_stored(plog: StoredLog, offset: int, hw: int, max_bytes: int) -> list[bytes]:
    try:
        return await _read_stored(plog, offset, hw, max_bytes)
    except InvalidPositionError as exc:  # trimmed, or compacted, while we looked
        if offset < plog.log_start_offset:
            raise OffsetOutOfRangeError(f"offset {offset} of {plog.name} was deleted") from exc
    try:  # a compaction swapped the ledgers under the read: once more, on the new list
        return await _read_stored(plog, offset, hw, max_bytes)
    except InvalidPositionError as exc:
        raise OffsetOutOfRangeError(f"offset {offset} of {plog.name} was deleted") from exc


async def _read_stored(plog: StoredLog, offset: int, hw: int, max_bytes: int) -> list[bytes]:
    ml = plog.ledger
    hints = plog.read_hints
    max_entries = max(1, min(1000, max_bytes // 4096 + 1))
    position = hints.pop(offset, None)
    entries = None
    if position is not None:
        # Read from the hint straight away; its first entry must hold the offset, else the hint
        # is stale and the index decides (no separate round trip to check the hint first).
        entries = await ml.read(position, max_entries, max(1, max_bytes))
        if not entries or not _holds(entries[0].data, offset):
            position, entries = None, None
    if position is None:
        position = await plog.locate(offset)
    if position is None:
        raise OffsetOutOfRangeError(f"offset {offset} of {plog.name} is no longer stored")
    out: list[bytes] = []
    total = 0
    last_read: tuple[Position, int] | None = None
    while position is not None:
        if entries is None:
            entries = await ml.read(position, max_entries, max(1, max_bytes - total))
            if not entries and not out:
                entries = await ml.read(position, 1)
        if not entries:
            break
        plog.offset_index.record_read(entries[0].position, *_range(entries[0].data))
        full = False
        for entry in entries:
            header = parse_header(entry.data)
            if header.base_offset >= hw or (out and total + len(entry.data) > max_bytes):
                full = True
                break
            if header.last_offset >= offset:
                out.append(entry.data)
                total += len(entry.data)
                last_read = (entry.position, header.last_offset)
        if full:
            break
        position = ml.next_position(entries[-1].position)
        entries = None
    if last_read is not None:
        # A consumer that keeps reading asks next for the offset after this batch.
        hint = ml.next_position(last_read[0])
        if hint is not None:
            hints[last_read[1] + 1] = hint
            while len(hints) > MAX_READ_HINTS:
                hints.pop(next(iter(hints)))
    return out


def _holds(data: bytes, offset: int) -> bool:
    header = parse_header(data)
    return header.base_offset <= offset <= header.last_offset


def _range(data: bytes) -> tuple[int, int]:
    header = parse_header(data)
    return header.base_offset, header.last_offset
