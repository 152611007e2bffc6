"""The in-memory entry-location index and the location blocks of the index log.

``EntryIndex`` maps (ledger, entry) -> (entry-log location, payload size).  Each ledger is two
typed arrays indexed by ``entry_id - base`` (8-byte location, 4-byte size, -1 = no entry), about
12 bytes per entry, plus per entry log the bytes each ledger holds there (GC and compaction
find dead and mostly-dead logs with it, without scanning).

A *location block* is the index log's unit for locations (``entry_index.py`` owns the file):
``u64 ledger id | u32 count`` then count little-endian i64 entry ids, count i64 locations and
count i64 sizes.  Rebuilding the index at start-up goes through ``LocationBlockLoader``: it
notes where each ledger's blocks are while the records are being checked, drops the blocks of
a ledger deleted later in the log, and then builds each ledger's arrays in bulk — one join and
one range check per ledger and C-speed array copies, no Python object per entry — falling back
to the per-entry path (``EntryIndex.set``) for anything unusual (a block that is not a run of
consecutive entry ids, entries below the ledger's base, holes being overwritten, a big-endian
host).  The result is the same index the per-entry path builds.

Pure data: this module must never do I/O, never import Trio, and never let the bulk path
produce an index that differs from applying the same blocks one entry at a time (a log left
with no bytes of any ledger may just be absent from ``log_usage`` instead of mapping to {}).
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from .entry_log import ENTRY_HEADER_SIZE, split_location

LEDGER_BLOCK = struct.Struct("<QI")  # ledger id, count; then count*(i64 entry, i64 loc, i64 size)
LITTLE_ENDIAN_HOST = sys.byteorder == "little"
_BLOCK_OFFSETS = struct.Struct("=4q")  # native, like array("q"): loader bookkeeping only
_NEGATIVE_HIGH_HALF = 0x8000_0000  # a location whose high u32 is at least this is negative


def array_from_le(typecode: str, raw: bytes | memoryview) -> array:
    """A typed array from little-endian bytes."""
    a = array(typecode)
    a.frombytes(raw)
    if not LITTLE_ENDIAN_HOST:
        a.byteswap()
    return a


def array_to_le(a: array) -> bytes:
    """Little-endian bytes of a typed array."""
    if not LITTLE_ENDIAN_HOST:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _is_run(entries_raw: bytes | memoryview, first: int, count: int) -> bool:
    """Whether the i64 entry ids are exactly first, first + 1, ..., first + count - 1."""
    if first < 0 or first + count > 1 << 63:
        return False
    return entries_raw == array("q", range(first, first + count)).tobytes()


def _high_half_runs(high: bytes) -> list[tuple[int, int, int]] | None:
    """Split u32 values (the high halves of locations: log ids) into runs of equal values,
    (value, start, end) each; None when they are not grouped (then the caller goes slow)."""
    count = len(high) // 4
    if high == high[:4] * count:
        return [(int.from_bytes(high[:4], "little"), 0, count)]
    values = array("I")
    values.frombytes(high)
    runs: list[tuple[int, int, int]] = []
    start = 0
    while start < count:
        value = values[start]
        end = bisect_right(values, value, start)  # right for sorted values, checked below
        if end <= start or high[4 * start : 4 * end] != high[4 * start : 4 * start + 4] * (
            end - start
        ):
            return None
        runs.append((value, start, end))
        start = end
    return runs


class LedgerEntryIndex:
    """Locations of one ledger's entries: arrays covering entry ids [base, base + len)."""

    __slots__ = ("base", "locs", "sizes", "count")

    def __init__(self) -> None:
        self.base = -1
        self.locs = array("q")
        self.sizes = array("I")
        self.count = 0

    def get(self, entry_id: int) -> tuple[int, int] | None:
        i = entry_id - self.base
        if self.base < 0 or i < 0 or i >= len(self.locs):
            return None
        loc = self.locs[i]
        return None if loc < 0 else (loc, self.sizes[i])

    def set(self, entry_id: int, location: int, size: int) -> tuple[int, int] | None:
        if self.base < 0:
            self.base = entry_id
        if entry_id < self.base:
            grow = self.base - entry_id
            self.locs[0:0] = array("q", [-1]) * grow
            self.sizes[0:0] = array("I", [0]) * grow
            self.base = entry_id
        i = entry_id - self.base
        if i >= len(self.locs):
            grow = i + 1 - len(self.locs)
            self.locs.extend(array("q", [-1]) * grow)
            self.sizes.extend(array("I", [0]) * grow)
        old, old_size = self.locs[i], self.sizes[i]
        self.locs[i] = location
        self.sizes[i] = size
        if old < 0:
            self.count += 1
            return None
        return old, old_size

    def max_entry_id(self) -> int:
        for i in range(len(self.locs) - 1, -1, -1):
            if self.locs[i] >= 0:
                return self.base + i
        return -1

    def items(self) -> Iterator[tuple[int, int, int]]:
        for i, loc in enumerate(self.locs):
            if loc >= 0:
                yield self.base + i, loc, self.sizes[i]

    def encode_block(self, ledger_id: int) -> bytes:
        """This ledger's entries as one location block."""
        if self.count != len(self.locs):  # holes: rare (entries set out of order)
            rows = list(self.items())
            return LEDGER_BLOCK.pack(ledger_id, len(rows)) + b"".join(
                array_to_le(array("q", [r[k] for r in rows])) for k in range(3)
            )
        count = len(self.locs)
        sizes = bytearray(8 * count)
        if LITTLE_ENDIAN_HOST:
            memoryview(sizes).cast("I")[::2] = memoryview(self.sizes)  # zero high halves
        else:
            sizes[:] = array_to_le(array("q", self.sizes))
        entries = array_to_le(array("q", range(self.base, self.base + count)))
        return LEDGER_BLOCK.pack(ledger_id, count) + entries + array_to_le(self.locs) + sizes


class EntryIndex:
    """The in-memory index plus per-entry-log byte accounting (ledger -> bytes per log)."""

    def __init__(self) -> None:
        self._ledgers: dict[int, LedgerEntryIndex] = {}
        self.log_usage: dict[int, dict[int, int]] = {}  # log id -> ledger id -> record bytes
        self.entry_count = 0

    def get(self, ledger_id: int, entry_id: int) -> tuple[int, int] | None:
        idx = self._ledgers.get(ledger_id)
        return None if idx is None else idx.get(entry_id)

    def ledger(self, ledger_id: int) -> LedgerEntryIndex | None:
        return self._ledgers.get(ledger_id)

    def ledger_ids(self) -> list[int]:
        return list(self._ledgers)

    def _account_log(self, log_id: int, ledger_id: int, delta: int) -> None:
        usage = self.log_usage.setdefault(log_id, {})
        left = usage.get(ledger_id, 0) + delta
        if left > 0:
            usage[ledger_id] = left
        else:
            usage.pop(ledger_id, None)

    def _account(self, location: int, ledger_id: int, delta: int) -> None:
        self._account_log(split_location(location)[0], ledger_id, delta)

    def set(self, ledger_id: int, entry_id: int, location: int, size: int) -> None:
        idx = self._ledgers.get(ledger_id)
        if idx is None:
            idx = self._ledgers[ledger_id] = LedgerEntryIndex()
        old = idx.set(entry_id, location, size)
        if old is None:
            self.entry_count += 1
        else:
            self._account(old[0], ledger_id, -(old[1] + ENTRY_HEADER_SIZE))
        self._account(location, ledger_id, size + ENTRY_HEADER_SIZE)

    def set_run(
        self,
        ledger_id: int,
        first: int,
        locs_raw: bytes | memoryview,
        sizes_raw: bytes | memoryview,
    ) -> bool:
        """Set entries first, first + 1, ... from little-endian i64 locations and sizes, in
        bulk; the same as ``set`` for each in turn.  Returns False, having changed nothing,
        when the bulk path does not apply (then call ``set`` per entry)."""
        count = len(locs_raw) // 8
        if not LITTLE_ENDIAN_HOST or count == 0 or len(sizes_raw) != 8 * count:
            return False
        size_halves = memoryview(sizes_raw).cast("B").cast("I")
        if size_halves[1::2].tobytes().count(0) != 4 * count:
            return False  # a size that does not fit u32: let ``set`` raise as it always did
        new_runs = _high_half_runs(memoryview(locs_raw).cast("B").cast("I")[1::2].tobytes())
        if new_runs is None or any(value >= _NEGATIVE_HIGH_HALF for value, _s, _e in new_runs):
            return False
        idx = self._ledgers.get(ledger_id)
        start = 0 if idx is None or idx.base < 0 else first - idx.base
        if start < 0:
            return False
        sizes = array("I")
        sizes.frombytes(size_halves[::2].tobytes())
        locs = array("q")
        locs.frombytes(locs_raw)
        deltas: dict[int, int] = {}
        for log_id, s, e in new_runs:
            deltas[log_id] = sum(sizes[s:e] if e - s < count else sizes) + ENTRY_HEADER_SIZE * (
                e - s
            )
        if idx is None or idx.base < 0:
            if idx is None:
                idx = self._ledgers[ledger_id] = LedgerEntryIndex()
            idx.base, idx.locs, idx.sizes = first, locs, sizes
            added = count
        else:
            have = len(idx.locs)
            overlap = max(0, min(count, have - start))
            added = count - overlap
            if overlap:
                old_locs = idx.locs[start : start + overlap]
                old_runs = _high_half_runs(memoryview(old_locs).cast("B").cast("I")[1::2].tobytes())
                if old_runs is None:
                    return False
                old_sizes = idx.sizes[start : start + overlap]
                for log_id, s, e in old_runs:
                    if log_id >= _NEGATIVE_HIGH_HALF:  # no entry there yet
                        added += e - s
                    else:
                        freed = sum(old_sizes[s:e]) + ENTRY_HEADER_SIZE * (e - s)
                        deltas[log_id] = deltas.get(log_id, 0) - freed
                idx.locs[start : start + overlap] = locs[:overlap]
                idx.sizes[start : start + overlap] = sizes[:overlap]
            if count > overlap:
                if start > have:
                    idx.locs.extend(array("q", [-1]) * (start - have))
                    idx.sizes.extend(array("I", [0]) * (start - have))
                idx.locs.extend(locs[overlap:] if overlap else locs)
                idx.sizes.extend(sizes[overlap:] if overlap else sizes)
        idx.count += added
        self.entry_count += added
        for log_id, delta in deltas.items():
            self._account_log(log_id, ledger_id, delta)
        return True

    def compare_and_set(
        self, ledger_id: int, entry_id: int, expected: int, location: int, size: int
    ) -> bool:
        """Move an entry (compaction) only if nobody rewrote it meanwhile."""
        current = self.get(ledger_id, entry_id)
        if current is None or current[0] != expected:
            return False
        self.set(ledger_id, entry_id, location, size)
        return True

    def delete_ledger(self, ledger_id: int) -> None:
        idx = self._ledgers.pop(ledger_id, None)
        if idx is None:
            return
        self.entry_count -= idx.count
        for usage in self.log_usage.values():
            usage.pop(ledger_id, None)

    def forget_log(self, log_id: int) -> None:
        self.log_usage.pop(log_id, None)

    def encode_locations(self, batch: dict[int, list[tuple[int, int, int]]]) -> bytes:
        parts = []
        for ledger_id, rows in batch.items():
            parts.append(LEDGER_BLOCK.pack(ledger_id, len(rows)))
            parts.append(array_to_le(array("q", [r[0] for r in rows])))
            parts.append(array_to_le(array("q", [r[1] for r in rows])))
            parts.append(array_to_le(array("q", [r[2] for r in rows])))
        return b"".join(parts)

    def snapshot_locations(self) -> Iterator[bytes]:
        """Location bodies of the whole index, in chunks of about 4 MiB."""
        parts: list[bytes] = []
        rows = 0
        for ledger_id, idx in self._ledgers.items():
            parts.append(idx.encode_block(ledger_id))
            rows += idx.count
            if rows >= 170_000:
                yield b"".join(parts)
                parts, rows = [], 0
        if parts:
            yield b"".join(parts)

    def apply_locations(self, body: bytes | memoryview) -> None:
        """Apply one location-record body (in bulk where it can)."""
        loader = LocationBlockLoader(self, memoryview(body))
        loader.add_blocks(0, len(body))
        loader.finish()


class LocationBlockLoader:
    """Collects the location blocks found in a buffer, per ledger, then applies them in bulk.

    The buffer (an index-log file) must stay unchanged until ``finish``.  Deletes are applied
    to the index at once and drop the ledger's blocks seen so far, so the work for a ledger
    deleted later in the log is never done.
    """

    def __init__(self, index: EntryIndex, buffer: memoryview) -> None:
        self._index = index
        self._buffer = buffer
        # ledger id -> per block: offsets of its entries, locations, sizes and its end, as
        # native i64s (bytearray += pack is the cheapest append per block)
        self._pending: dict[int, bytearray] = {}

    def add_blocks(self, start: int, end: int) -> None:
        """Note the blocks of one location-record body at buffer[start:end]."""
        unpack, pack, buffer = LEDGER_BLOCK.unpack_from, _BLOCK_OFFSETS.pack, self._buffer
        pending = self._pending
        pos = start
        while pos < end:
            if pos + LEDGER_BLOCK.size > end:
                raise ValueError("truncated location block header")
            ledger_id, count = unpack(buffer, pos)
            at = pos + LEDGER_BLOCK.size
            pos = at + 24 * count
            if pos > end:
                raise ValueError("truncated location block")
            blocks = pending.get(ledger_id)
            if blocks is None:
                blocks = pending[ledger_id] = bytearray()
            blocks += pack(at, at + 8 * count, at + 16 * count, pos)

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        for ledger_id in ledger_ids:
            self._pending.pop(ledger_id, None)
            self._index.delete_ledger(ledger_id)

    def finish(self) -> None:
        """Apply every noted block, in log order per ledger."""
        pending, self._pending = self._pending, {}
        for ledger_id in list(pending):
            blocks = array("q")
            blocks.frombytes(pending.pop(ledger_id))  # freed as we go: the arrays reuse it
            self._apply_ledger(ledger_id, blocks)

    def _column(self, blocks: array, column: int) -> bytes | memoryview:
        """Column 0 (entry ids), 1 (locations) or 2 (sizes) of all the blocks, joined."""
        if len(blocks) == 4:
            return self._buffer[blocks[column] : blocks[column + 1]]
        starts, stops = blocks[column::4], blocks[column + 1 :: 4]
        return b"".join(map(self._buffer.__getitem__, map(slice, starts, stops)))

    def _apply_ledger(self, ledger_id: int, blocks: array) -> None:
        entries = self._column(blocks, 0)
        count = len(entries) // 8
        if count == 0:
            return
        first = int.from_bytes(entries[:8], "little", signed=True)
        if _is_run(entries, first, count) and self._index.set_run(
            ledger_id, first, self._column(blocks, 1), self._column(blocks, 2)
        ):
            return
        for at, locs_at in zip(blocks[::4], blocks[1::4], strict=True):
            self._apply_block(ledger_id, at, (locs_at - at) // 8)

    def _apply_block(self, ledger_id: int, at: int, count: int) -> None:
        if count == 0:
            return
        buf = self._buffer
        entries = buf[at : at + 8 * count]
        locs = buf[at + 8 * count : at + 16 * count]
        sizes = buf[at + 16 * count : at + 24 * count]
        first = int.from_bytes(entries[:8], "little", signed=True)
        if _is_run(entries, first, count) and self._index.set_run(ledger_id, first, locs, sizes):
            return
        index = self._index
        for e, loc, size in zip(
            array_from_le("q", entries), array_from_le("q", locs), array_from_le("q", sizes),
            strict=True,
        ):
            index.set(ledger_id, e, loc, size)
