"""Kafka offset -> ledger entry position for one partition log, kept sparse and lazy.

A partition's batches live one per entry in a chain of ledgers; each stored entry's header says
its offset range (patched baseOffset, lastOffsetDelta).  Offsets grow with position, so:

1. the ledger holding an offset is found by binary search over the ledgers' first offsets
   (the base offset of entry 0 of each ledger, read once and cached);
2. inside the ledger, the entry is found by binary search over entry ids, narrowed by known
   points (batches recorded as they were appended, every `append_interval`-th one, and every
   probe a previous search read), so repeated lookups cost few or no reads.

A compacted log has gaps (offsets whose records were compacted away, batches that lost
their last records keep their last offset): a lookup answers the entry holding the offset OR,
when no entry holds it, the first entry after it -- Kafka serves a fetch from a compacted-away
offset with the next surviving batch.

The caller supplies `read_header(position)`; this module decides nothing about caching entries,
durability, or which ledgers exist (it is told via `ledgers`).
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Sequence

from ledger_backend.managed_ledger.types import LedgerInfo, Position
from protocols.kafka.record_batch import BatchHeader

ReadHeader = Callable[[Position], Awaitable[BatchHeader]]

# Per ledger: (base_offset, last_offset, entry_id) sorted by base_offset.
_Point = tuple[int, int, int]


class OffsetIndex:
    def __init__(self, append_interval: int = 8, max_points_per_ledger: int = 4096) -> None:
        self.append_interval = max(1, append_interval)
        self.max_points_per_ledger = max_points_per_ledger
        self._ledger_first: dict[int, int] = {}
        self._points: dict[int, list[_Point]] = {}

    def record_append(self, position: Position, base_offset: int, last_offset: int) -> None:
        """Note an appended batch (keeps entry 0 of each ledger and every n-th entry)."""
        if position.entry_id == 0:
            self._ledger_first[position.ledger_id] = base_offset
        if position.entry_id % self.append_interval == 0:
            self._add_point(position, base_offset, last_offset)

    def record_read(self, position: Position, base_offset: int, last_offset: int) -> None:
        if position.entry_id == 0:
            self._ledger_first[position.ledger_id] = base_offset
        self._add_point(position, base_offset, last_offset)

    def forget_ledgers(self, ledger_ids: Sequence[int]) -> None:
        for ledger_id in ledger_ids:
            self._ledger_first.pop(ledger_id, None)
            self._points.pop(ledger_id, None)

    def _add_point(self, position: Position, base_offset: int, last_offset: int) -> None:
        points = self._points.setdefault(position.ledger_id, [])
        point = (base_offset, last_offset, position.entry_id)
        i = bisect.bisect_left(points, point)
        if i < len(points) and points[i] == point:
            return
        if len(points) >= self.max_points_per_ledger:
            # Thin out by half: binary search needs only a sparse skeleton.
            del points[1::2]
            i = bisect.bisect_left(points, point)
        points.insert(i, point)

    async def _first_offset(self, ledger_id: int, read_header: ReadHeader) -> int:
        first = self._ledger_first.get(ledger_id)
        if first is None:
            position = Position(ledger_id, 0)
            header = await read_header(position)
            self.record_read(position, header.base_offset, header.last_offset)
            first = header.base_offset
        return first

    async def locate(
        self, offset: int, ledgers: Sequence[LedgerInfo], read_header: ReadHeader
    ) -> Position | None:
        """The position of the entry whose batch holds `offset`, else of the first entry after
        it; None if no entry ends at or after `offset`."""
        candidates = [info for info in ledgers if info.entries > 0]
        if not candidates:
            return None
        # Most lookups are near the end: try the newest ledger first.
        lo, hi = 0, len(candidates) - 1
        if await self._first_offset(candidates[hi].ledger_id, read_header) <= offset:
            chosen = hi
        else:
            hi -= 1
            chosen = -1
            while lo <= hi:
                mid = (lo + hi) // 2
                if await self._first_offset(candidates[mid].ledger_id, read_header) <= offset:
                    chosen = mid
                    lo = mid + 1
                else:
                    hi = mid - 1
            if chosen < 0:
                return Position(candidates[0].ledger_id, 0)  # before the first entry
        found = await self._locate_in_ledger(offset, candidates[chosen], read_header)
        if found is None and chosen + 1 < len(candidates):
            return Position(candidates[chosen + 1].ledger_id, 0)  # past its last entry
        return found

    async def _locate_in_ledger(
        self, offset: int, info: LedgerInfo, read_header: ReadHeader
    ) -> Position | None:
        """The first entry of the ledger whose last offset is >= `offset`, or None."""
        ledger_id = info.ledger_id
        lo_entry, hi_entry = 0, info.entries - 1
        answer: int | None = None
        points = self._points.get(ledger_id, [])
        i = bisect.bisect_right(points, (offset, 1 << 62, 1 << 62))
        if i > 0:
            base, last, entry_id = points[i - 1]
            if base <= offset <= last:
                return Position(ledger_id, entry_id)
            lo_entry = max(lo_entry, entry_id + 1)
        if i < len(points):  # starts after `offset`: the answer unless an earlier entry is
            answer = points[i][2]
            hi_entry = min(hi_entry, answer - 1)
        while lo_entry <= hi_entry:
            mid = (lo_entry + hi_entry) // 2
            position = Position(ledger_id, mid)
            header = await read_header(position)
            self.record_read(position, header.base_offset, header.last_offset)
            if offset > header.last_offset:
                lo_entry = mid + 1
            elif offset >= header.base_offset:
                return position
            else:
                answer = mid
                hi_entry = mid - 1
        return None if answer is None else Position(ledger_id, answer)
