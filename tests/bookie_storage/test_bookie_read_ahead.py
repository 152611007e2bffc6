"""Concurrent reads of consecutive entries share read-aheads instead of each reading ahead."""

from __future__ import annotations

import trio

from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


async def test_parallel_readers_of_a_run_share_one_entry_log_read(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        payloads = [bytes([i % 251]) * 20_000 for i in range(32)]
        for i, payload in enumerate(payloads):
            await storage.add_entry(7, i, i - 1, payload)
        await storage.checkpoint()  # flushed to the entry log; the write cache lets go
        storage.read_cache._entries.clear()  # type: ignore[attr-defined]
        storage.read_cache.size = 0

        spans: list[tuple[int, int]] = []
        real_read_span = storage.logs.read_span  # type: ignore[attr-defined]

        def counting_read_span(log_id: int, offset: int, length: int) -> bytes:
            spans.append((offset, length))
            return real_read_span(log_id, offset, length)

        storage.logs.read_span = counting_read_span  # type: ignore[attr-defined]
        got: dict[int, bytes] = {}

        async def read(entry_id: int) -> None:
            got[entry_id] = await storage.read_entry(7, entry_id)

        async with trio.open_nursery() as nursery:
            for entry_id in range(16):
                nursery.start_soon(read, entry_id)
        assert got == {i: payloads[i] for i in range(16)}
        # Trio starts the readers in no particular order, so several runs may be read; but no
        # byte of the entry log is read twice (each read-ahead stops where another one began).
        covered = sorted(spans)
        for (start, length), (next_start, _) in zip(covered, covered[1:], strict=False):
            assert start + length <= next_start, f"overlapping entry-log reads: {covered}"
        assert sum(length for _, length in spans) < 40 * 20_100
