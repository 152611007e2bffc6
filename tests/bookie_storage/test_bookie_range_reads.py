"""Range reads: one entry-log read per range, shared by concurrent readers; early flushes."""

from __future__ import annotations

import trio

from ledger_backend.bookie.storage import DurableBookieStorage, open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig, NoSuchEntryError
from ledger_backend.bookie.write_cache import WriteCache

ENTRY_BYTES = 10_000


def payload(entry_id: int) -> bytes:
    return bytes([entry_id % 251]) * ENTRY_BYTES


async def _flushed_ledger(storage: DurableBookieStorage, entries: int) -> list[tuple[int, int]]:
    """Ledger 3 with `entries` entries, all in the entry log and none cached; returns the list
    that records every entry-log read (offset, length) from now on."""
    for i in range(entries):
        await storage.add_entry(3, i, i - 1, payload(i))
    await storage.checkpoint()
    storage.read_cache._entries.clear()  # type: ignore[attr-defined]
    storage.read_cache.size = 0
    spans: list[tuple[int, int]] = []
    real_read_span = storage.logs.read_span

    def counting_read_span(log_id: int, offset: int, length: int) -> bytes:
        spans.append((offset, length))
        return real_read_span(log_id, offset, length)

    storage.logs.read_span = counting_read_span  # type: ignore[method-assign]
    return spans


async def test_a_range_read_is_one_entry_log_read(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        spans = await _flushed_ledger(storage, 200)
        assert bookie_config.read_ahead_entries < 100
        got = await storage.read_entries(3, 0, 99)
        assert got == [payload(i) for i in range(100)]
        assert len(spans) == 1  # not one read per read_ahead_entries


async def test_concurrent_range_reads_share_the_entry_log_reads(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        spans = await _flushed_ledger(storage, 200)
        got: dict[tuple[int, int], list[bytes]] = {}

        async def read(first: int, last: int) -> None:
            got[first, last] = await storage.read_entries(3, first, last)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 0, 99)
            nursery.start_soon(read, 50, 149)
            nursery.start_soon(read, 0, 149)
        assert got[0, 99] == [payload(i) for i in range(100)]
        assert got[50, 149] == [payload(i) for i in range(50, 150)]
        assert got[0, 149] == [payload(i) for i in range(150)]
        covered = sorted(spans)
        for (start, length), (next_start, _) in zip(covered, covered[1:], strict=False):
            assert start + length <= next_start, f"overlapping entry-log reads: {covered}"
        assert sum(length for _offset, length in spans) == 150 * (ENTRY_BYTES + 28)


async def test_a_range_read_fails_like_single_reads(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await _flushed_ledger(storage, 10)
        try:
            await storage.read_entries(3, 5, 12)
        except NoSuchEntryError:
            pass
        else:
            raise AssertionError("reading past the last entry must fail")


def test_the_write_cache_asks_for_a_flush_at_half_a_generation() -> None:
    cache = WriteCache(1000)  # generations of 500 bytes
    cache.put(1, 0, b"x" * 200)
    assert not cache.should_flush()
    cache.put(1, 1, b"x" * 50)
    assert cache.should_flush()  # 250 of 500: flush now, before adds have to wait
    cache.start_flush()
    cache.put(1, 2, b"x" * 300)
    assert not cache.should_flush()  # a flush is running already
    cache.finish_flush()
    assert cache.should_flush()
