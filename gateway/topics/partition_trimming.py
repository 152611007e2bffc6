"""Moving a partition log's start (delete-records, retention) and the compaction point it
remembers (one module per concern: partition_log.py keeps appends, reads and the log's state).

`delete_records_before` advances the log start to an offset and deletes the whole ledgers
below it; `apply_retention` trims the ledgers past retention and moves the log start after
them; `_set_log_start` writes the new start to the partition state node first, then drops what
the log holds below it (tail cache, read hints, producer state, timestamps).
`record_cleaned_through` persists the compaction point before the swap that compacts up to it
(gateway/topics/compactor.py rewrites the ledgers); `forget_rewritten` drops what the log
remembers of swapped-out ledgers.

They are PartitionLog's methods (bound in its class body: `self` is the log, typed by the
`TrimmedLog` protocol), kept here for size.

This module must never move the log start past the high watermark.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.topics.offset_index import OffsetIndex
from gateway.topics.partition_timestamps import TimestampSearch
from gateway.topics.producer_state import ProducerStateManager
from gateway.topics.tail_cache import BatchTailCache
from ledger_backend.managed_ledger.types import Position
from protocols.kafka.errors import OffsetOutOfRangeError
from protocols.kafka.record_batch import BatchHeader


class TrimmedLog(Protocol):
    """What these steps use of PartitionLog (a Protocol, so this module does not import it)."""

    ledger: Any
    high_watermark: int
    log_start_offset: int
    offset_index: OffsetIndex
    read_hints: dict[int, Position]
    _cache: BatchTailCache
    _timestamps: TimestampSearch
    _producers: ProducerStateManager

    @property
    def cleaned_through(self) -> int: ...

    def _check_usable(self) -> None: ...
    async def locate(self, offset: int) -> Position | None: ...
    async def read_header(self, position: Position) -> BatchHeader: ...
    async def _write_state(self, **changes: object) -> None: ...
    async def _set_log_start(self, offset: int) -> None: ...


async def delete_records_before(self: TrimmedLog, offset: int) -> int:
    """Advance the log start to `offset` (-1: the high watermark); whole ledgers below it go."""
    self._check_usable()
    if offset == -1:
        offset = self.high_watermark
    if offset < 0 or offset > self.high_watermark:
        raise OffsetOutOfRangeError(
            f"cannot delete before {offset}: outside [0, {self.high_watermark}]"
        )
    if offset <= self.log_start_offset:
        return self.log_start_offset
    await self._set_log_start(offset)
    position = await self.locate(offset) if offset < self.high_watermark else None
    ledgers = [info.ledger_id for info in self.ledger.ledgers]
    keep_from = position.ledger_id if position is not None else ledgers[-1]
    deleted = await self.ledger.delete_ledgers_before(keep_from)
    self.offset_index.forget_ledgers(deleted)
    return self.log_start_offset


async def apply_retention(self: TrimmedLog) -> list[int]:
    """Trim whole ledgers past retention.ms/bytes and move the log start after them."""
    self._check_usable()
    deleted = await self.ledger.trim()
    if deleted:
        self.offset_index.forget_ledgers(deleted)
        first = self.ledger.first_position
        if first is not None and self.ledger.last_confirmed is not None:
            new_start = (await self.read_header(first)).base_offset
        else:
            new_start = self.high_watermark
        if new_start > self.log_start_offset:
            await self._set_log_start(new_start)
    return deleted


async def record_cleaned_through(self: TrimmedLog, offset: int) -> None:
    """Persist the compaction point BEFORE the swap that compacts up to it."""
    self._check_usable()
    if offset > self.cleaned_through:
        await self._write_state(cleaned_through=offset)


def forget_rewritten(self: TrimmedLog, ledger_ids: list[int], cleaned_through: int) -> None:
    """Drop what this log remembers of swapped-out ledgers and of batches below the
    compaction point (the tail cache may still hold their uncompacted bytes)."""
    self.offset_index.forget_ledgers(ledger_ids)
    self.read_hints.clear()
    self._cache.truncate_before(cleaned_through)
    self._timestamps.truncate_before(cleaned_through)


async def _set_log_start(self: TrimmedLog, offset: int) -> None:
    await self._write_state(log_start_offset=offset)
    self.log_start_offset = offset
    self._cache.truncate_before(offset)
    self.read_hints.clear()
    self._producers.truncate_before(offset)
    self._timestamps.truncate_before(offset)
