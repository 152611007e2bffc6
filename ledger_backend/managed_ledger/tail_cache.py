"""In-memory cache of a managed ledger's most recently acknowledged entries.

Entries go in in acknowledgement order (= log order) and leave oldest first once the cache
holds more than its byte budget. An entry may only leave when the caller's `evictable`
predicate says bookie reads can serve it (its ledger is closed, or the bookies already know a
LAC at or past it); otherwise eviction stops and the cache runs over budget rather than make
an acknowledged entry unreadable. This module must never do I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ledger_backend.managed_ledger.types import Position


class TailCache:
    def __init__(self, max_bytes: int, evictable: Callable[[Position], bool]) -> None:
        self._max_bytes = max(0, max_bytes)
        self._evictable = evictable
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position)

    def __contains__(self, position: object) -> bool:
        return position in self._entries

    def put(self, position: Position, data: bytes) -> None:
        if position in self._entries:
            return
        self._entries[position] = data
        self._bytes += len(data)
        self.evict()

    def evict(self) -> None:
        """Drop oldest evictable entries while over budget (stops at the first one kept)."""
        while self._bytes > self._max_bytes and self._entries:
            oldest = next(iter(self._entries))
            if not self._evictable(oldest):
                return
            self._bytes -= len(self._entries.pop(oldest))

    def drop_ledgers(self, ledger_ids: set[int]) -> None:
        for position in [p for p in self._entries if p.ledger_id in ledger_ids]:
            self._bytes -= len(self._entries.pop(position))

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
