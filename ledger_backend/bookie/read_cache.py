"""The read cache: recently read (and read-ahead) entries, least recently used out first.

Bounded by read_cache_bytes.  Pure data: no I/O, no Trio; the engine fills it from entry-log
reads (one pread of a run of contiguous entries per miss) and empties a ledger on delete.
It must never hold an entry that was not checked (CRC, ledger, entry id) when read.
"""

from __future__ import annotations

from collections import OrderedDict


class ReadCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        data = self._entries.get(key)
        if data is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return data

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._entries[key] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted)

    def drop_entry(self, ledger_id: int, entry_id: int) -> None:
        old = self._entries.pop((ledger_id, entry_id), None)
        if old is not None:
            self.size -= len(old)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size -= len(self._entries.pop(key))

    def __len__(self) -> int:
        return len(self._entries)
