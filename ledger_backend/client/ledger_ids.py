"""Ledger ids for brand-new managed ledgers, reserved from the shared counter in blocks.

`store.next_id` costs one durable metadata write per ledger. A partition's first ledger can
take an id from a block this client reserved earlier (one compare-and-set of the same counter
node moves it past the whole block), so opening thousands of new partitions costs a counter
write per BLOCK of them. Ids stay unique across processes (every reservation is a CAS on the
counter that `next_id` also uses); a crash loses the rest of a block (gaps are harmless).

Ids from a block are NOT increasing across processes: another process's `next_id` may have
handed out a higher id before this block's id is used. A managed ledger lists its ledgers in
increasing id order, so a block id is only for a ledger that is the first of its managed
ledger, or the first a new owner adds to an existing list, with `above` the highest id listed
(`BookKeeper.prepare_ledger`); every other ledger comes from `next_id`, which is above every
reserved block. This module must never hand out an id twice nor write the counter
without the version it read.
"""

from __future__ import annotations

from collections import deque

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    parse_counter,
)

DEFAULT_BLOCK = 128


class LedgerIdBlocks:
    """Hands out ids from blocks reserved on `counter_path` (data: last id, ASCII decimal)."""

    def __init__(self, store: MetadataStore, counter_path: str, block: int = DEFAULT_BLOCK):
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self._store = store
        self._path = counter_path
        self._block = block
        self._free: deque[int] = deque()
        self._refill = trio.Lock()

    async def take(self, above: int = 0) -> int:
        """An id of a reserved block, greater than `above`: ids of the block at or below it
        are skipped (gaps are harmless), and a block reserved now lies above every id handed
        out so far, `above` included when it names an existing ledger."""
        while True:
            while self._free and self._free[0] <= above:
                self._free.popleft()
            if self._free:
                return self._free.popleft()
            async with self._refill:  # one reservation at a time; waiters use its ids
                if not self._free:
                    self._free.extend(await self._reserve())

    async def _reserve(self) -> range:
        while True:  # compare-and-set loop: a lost race means another process reserved
            try:
                data, stat = await self._store.get(self._path)
            except NoNodeError:
                try:
                    await self._store.create(self._path, str(self._block).encode("ascii"),
                                             make_parents=True)
                except NodeExistsError:
                    continue
                return range(1, self._block + 1)
            last = parse_counter(data)
            try:
                await self._store.set(self._path, str(last + self._block).encode("ascii"),
                                      stat.version)
            except BadVersionError:
                continue
            return range(last + 1, last + self._block + 1)
