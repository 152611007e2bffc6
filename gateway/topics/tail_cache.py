"""The newest stored record batches of one partition, in memory, looked up by Kafka offset.

Batches go in at offset-assignment time, in offset order, so the cache always holds one
contiguous run of offsets ending at the log's end.  A fetch at an offset inside that run is
answered from memory with no offset -> position lookup and no bookie read; consumers that keep up
never leave it.  Batches that are not durable yet sit here too, so every reader passes the high
watermark and gets only batches that end below it.  The byte budget is enforced by dropping the
oldest batches.

This module must never do I/O or decide durability: it only remembers bytes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CachedBatch:
    base_offset: int
    last_offset: int
    data: bytes


class BatchTailCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self._batches: list[CachedBatch] = []
        self._last_offsets: list[int] = []  # parallel to _batches, for bisect
        self._head = 0  # index of the oldest live batch (amortised O(1) eviction)
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._batches) - self._head

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def first_offset(self) -> int | None:
        return self._batches[self._head].base_offset if len(self) else None

    def put(self, base_offset: int, last_offset: int, data: bytes) -> None:
        """Add the batch that follows the newest one (a gap clears the cache first)."""
        if len(self) and self._batches[-1].last_offset + 1 != base_offset:
            self.clear()
        if len(data) > self.max_bytes:
            self.clear()
            return
        self._batches.append(CachedBatch(base_offset, last_offset, data))
        self._last_offsets.append(last_offset)
        self._bytes += len(data)
        while self._bytes > self.max_bytes and len(self):
            self._bytes -= len(self._batches[self._head].data)
            self._head += 1
        if self._head > 1024 and self._head * 2 > len(self._batches):
            del self._batches[: self._head]
            del self._last_offsets[: self._head]
            self._head = 0

    def read(self, offset: int, high_watermark: int, max_bytes: int) -> list[bytes] | None:
        """Batches from the one holding `offset`, ending below `high_watermark`, within
        `max_bytes` (the first one always); None if `offset` is older than the cache."""
        first = self.first_offset
        if first is None or offset < first:
            return None
        i = bisect.bisect_left(self._last_offsets, offset, self._head)
        out: list[bytes] = []
        total = 0
        batches = self._batches
        end = len(batches)
        while i < end:
            batch = batches[i]
            if batch.last_offset >= high_watermark:
                break
            data = batch.data
            total += len(data)
            if out and total > max_bytes:
                break
            out.append(data)
            i += 1
        return out

    def truncate_before(self, offset: int) -> None:
        """Forget batches that end below `offset` (records deleted)."""
        while len(self) and self._batches[self._head].last_offset < offset:
            self._bytes -= len(self._batches[self._head].data)
            self._head += 1

    def clear(self) -> None:
        self._batches.clear()
        self._last_offsets.clear()
        self._head = 0
        self._bytes = 0
