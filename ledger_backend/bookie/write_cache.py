"""The write cache: entries added since the last checkpoint, served first to readers.

Two generations: ``active`` takes new adds; at a checkpoint it becomes ``flushing`` while its
entries are written (sorted by ledger, then entry) to the entry logs, and a fresh ``active``
starts.  Each generation is capped at half of write_cache_bytes, so the whole cache never holds
more than write_cache_bytes (one entry bigger than the cap is still taken when its generation is
empty, otherwise it could never be stored).  When ``active`` is full the engine makes adds wait
for the flush instead of growing the cache.

Pure data: this module must never do I/O, never block and never import Trio.
"""

from __future__ import annotations

Generation = dict[int, dict[int, bytes]]  # ledger id -> entry id -> payload


class WriteCache:
    def __init__(self, max_bytes: int) -> None:
        self.generation_budget = max(max_bytes // 2, 1)
        self.active: Generation = {}
        self.active_bytes = 0
        self.flushing: Generation | None = None
        self.flushing_bytes = 0

    def has_room_for(self, size: int) -> bool:
        return self.active_bytes == 0 or self.active_bytes + size <= self.generation_budget

    def is_full(self) -> bool:
        return self.active_bytes >= self.generation_budget

    def should_flush(self) -> bool:
        """Half of ``active``'s budget is used and no flush runs: start one now, so that it is
        done before ``active`` fills (adds wait only when both halves are busy)."""
        return self.flushing is None and self.active_bytes * 2 >= self.generation_budget

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        entries = self.active.get(ledger_id)
        if entries is None:
            entries = self.active[ledger_id] = {}
        old = entries.get(entry_id)
        if old is not None:
            self.active_bytes -= len(old)
        entries[entry_id] = data
        self.active_bytes += len(data)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self.active.get(ledger_id)
        if entries is not None:
            data = entries.get(entry_id)
            if data is not None:
                return data
        if self.flushing is not None:
            entries = self.flushing.get(ledger_id)
            if entries is not None:
                return entries.get(entry_id)
        return None

    def max_entry_id(self, ledger_id: int) -> int:
        best = -1
        for gen in (self.active, self.flushing):
            if gen is not None and gen.get(ledger_id):
                best = max(best, max(gen[ledger_id]))
        return best

    def start_flush(self) -> Generation:
        """Turn ``active`` into ``flushing`` (the previous flush must be finished)."""
        assert self.flushing is None, "a flush is already running"
        self.flushing, self.flushing_bytes = self.active, self.active_bytes
        self.active, self.active_bytes = {}, 0
        return self.flushing

    def finish_flush(self) -> None:
        self.flushing, self.flushing_bytes = None, 0

    def abort_flush(self) -> None:
        """The flush failed: merge its entries back under the newer active ones."""
        if self.flushing is None:
            return
        for ledger_id, entries in self.flushing.items():
            newer = self.active.get(ledger_id, {})
            merged = dict(entries)
            merged.update(newer)
            self.active[ledger_id] = merged
        self.active_bytes = sum(len(d) for e in self.active.values() for d in e.values())
        self.finish_flush()

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self.active.pop(ledger_id, None)
        if entries:
            self.active_bytes -= sum(len(d) for d in entries.values())
        if self.flushing is not None:
            entries = self.flushing.pop(ledger_id, None)
            if entries:
                self.flushing_bytes -= sum(len(d) for d in entries.values())


def sorted_entries(generation: Generation) -> list[tuple[int, int, bytes]]:
    """(ledger, entry, payload) sorted by ledger then entry: one ledger stays contiguous."""
    out: list[tuple[int, int, bytes]] = []
    for ledger_id in sorted(generation):
        entries = generation[ledger_id]
        out.extend((ledger_id, e, entries[e]) for e in sorted(entries))
    return out
