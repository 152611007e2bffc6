"""The durable engine through the BookieStorage interface: adds, reads, fencing, LAC, deletes,
restart and replay, read-only mode, the write-cache memory bound."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable

import pytest
import trio

from ledger_backend.bookie.journal_format import LogMark, list_journal_files
from ledger_backend.bookie.journal_scanner import JournalScanner
from ledger_backend.bookie.storage import DurableBookieStorage, open_bookie_storage
from ledger_backend.bookie.storage_api import (
    BookieReadOnlyError,
    BookieStorageConfig,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)


def payload(ledger: int, entry: int, size: int = 300) -> bytes:
    seed = f"{ledger}:{entry}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await trio.sleep(0.01)
    raise AssertionError("condition never became true")


async def add_many(storage: DurableBookieStorage, ledger: int, count: int, size: int = 300) -> None:
    for e in range(count):
        await storage.add_entry(ledger, e, e - 1, payload(ledger, e, size))


async def test_add_read_from_cache_disk_and_after_restart(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        async with trio.open_nursery() as nursery:
            for ledger in (1, 2, 3):
                nursery.start_soon(add_many, storage, ledger, 50)
        assert await storage.read_entry(2, 7) == payload(2, 7)  # write cache
        await storage.checkpoint()
        assert storage.write_cache.active_bytes == 0
        assert await storage.read_entry(2, 8) == payload(2, 8)  # entry log, with read-ahead
        assert storage.read_cache.get(2, 9) == payload(2, 9)
        assert storage.last_entry_id(3) == 49 and storage.last_add_confirmed(3) == 48
        assert storage.ledger_ids() == [1, 2, 3]
    async with open_bookie_storage(bookie_config) as storage:
        for ledger in (1, 2, 3):
            for e in range(50):
                assert await storage.read_entry(ledger, e) == payload(ledger, e)
        assert storage.last_entry_id(1) == 49 and storage.last_add_confirmed(1) == 48


async def test_missing_ledger_and_entry(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        with pytest.raises(NoSuchLedgerError):
            await storage.read_entry(9, 0)
        with pytest.raises(NoSuchLedgerError):
            storage.last_add_confirmed(9)
        assert storage.last_entry_id(9) == -1
        await storage.add_entry(9, 0, -1, b"x")
        with pytest.raises(NoSuchEntryError):
            await storage.read_entry(9, 1)
        await storage.checkpoint()
        with pytest.raises(NoSuchEntryError):
            await storage.read_entry(9, 1)


async def test_fence_refuses_adds_allows_recovery_and_is_durable(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await add_many(storage, 4, 3)
        assert await storage.fence(4) == 1
        assert await storage.fence(77) == -1  # unknown ledgers get fenced too
        with pytest.raises(LedgerFencedError):
            await storage.add_entry(4, 3, 2, b"late")
        await storage.add_entry(4, 3, 2, b"recovered", recovery_add=True)
        # crash image: copy the data dir while open (journal fsynced, nothing checkpointed)
        crash_image = bookie_config.data_dir.with_name("crash-image")
        shutil.copytree(bookie_config.data_dir, crash_image)
    for data_dir in (bookie_config.data_dir, crash_image):
        config = dataclasses.replace(bookie_config, data_dir=data_dir)
        async with open_bookie_storage(config) as storage:
            assert storage.is_fenced(4) and storage.is_fenced(77)
            with pytest.raises(LedgerFencedError):
                await storage.add_entry(4, 4, 3, b"still refused")
            assert await storage.read_entry(4, 3) == b"recovered"
            assert storage.ledger_ids() == [4, 77]


async def test_lac_long_poll(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        assert await storage.wait_for_lac_update(5, -1, 0.01) == -1  # unknown: waits, then -1
        await storage.add_entry(5, 0, -1, b"a")
        result = []

        async def poll() -> None:
            result.append(await storage.wait_for_lac_update(5, -1, 10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(0.01)
            assert result == []
            await storage.add_entry(5, 1, 0, b"b")
        assert result == [0]
        assert storage.last_add_confirmed(5) == 0
        assert await storage.wait_for_lac_update(5, -1, 10) == 0  # already newer: at once


async def test_delete_ledger_is_durable_and_refuses_adds(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await add_many(storage, 6, 5)
        await add_many(storage, 7, 5)
        await storage.checkpoint()
        await storage.delete_ledger(6)
        with pytest.raises(NoSuchLedgerError):
            await storage.read_entry(6, 0)
        with pytest.raises(LedgerFencedError):
            await storage.add_entry(6, 5, 4, b"from a deposed writer")
        crash_image = bookie_config.data_dir.with_name("crash-image")
        shutil.copytree(bookie_config.data_dir, crash_image)
    for data_dir in (bookie_config.data_dir, crash_image):
        config = dataclasses.replace(bookie_config, data_dir=data_dir)
        async with open_bookie_storage(config) as storage:
            assert storage.ledger_ids() == [7]
            with pytest.raises(NoSuchLedgerError):
                await storage.read_entry(6, 0)
            assert await storage.read_entry(7, 4) == payload(7, 4)


async def test_replay_logs_where_it_stopped_and_keeps_acknowledged(
    bookie_config: BookieStorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await add_many(storage, 1, 20)
        crash_image = bookie_config.data_dir.with_name("crash-image")
        shutil.copytree(bookie_config.data_dir, crash_image)
    journal_dir = crash_image / "journal"
    newest = journal_dir / f"{list_journal_files(journal_dir)[-1]:016x}.jnl"
    scanner = JournalScanner(journal_dir, LogMark(0, 0))
    while scanner.next_batch():
        pass
    assert scanner.stop is not None and scanner.stop.clean
    good_size = scanner.stop.offset  # the records' end (a preallocated zero tail may follow)
    with newest.open("r+b") as f:  # a torn write after it, as into a preallocated region
        f.seek(good_size)
        f.write(b"\x00\x00\x10\x00garbage-of-a-torn-write")
    config = dataclasses.replace(bookie_config, data_dir=crash_image)
    with caplog.at_level(logging.INFO, logger="ledger_backend.bookie.storage"):
        async with open_bookie_storage(config) as storage:
            assert storage.replayed_records == 20
            stop = storage.replay_stop
            assert stop is not None and not stop.clean and stop.offset == good_size
            for e in range(20):
                assert await storage.read_entry(1, e) == payload(1, e)
            await storage.add_entry(1, 20, 19, b"after restart")
    assert f"stopped at journal file {newest.stem} offset {good_size}" in caplog.text
    async with open_bookie_storage(config) as storage:  # the torn file is behind the mark now
        assert storage.replay_stop is not None and storage.replay_stop.clean
        assert await storage.read_entry(1, 20) == b"after restart"


async def test_checkpoint_trims_journal(bookie_config: BookieStorageConfig) -> None:
    config = dataclasses.replace(bookie_config, journal_max_file_bytes=8192)
    async with open_bookie_storage(config) as storage:
        await add_many(storage, 1, 100, size=1000)
        journal_dir = config.data_dir / "journal"
        assert len(list_journal_files(journal_dir)) > 5
        await storage.checkpoint()
        assert list_journal_files(journal_dir) == [storage.journal.current_file_id]  # type: ignore[union-attr]
    async with open_bookie_storage(config) as storage:
        assert storage.replayed_records == 0
        assert await storage.read_entry(1, 99) == payload(1, 99, 1000)


async def test_read_only_over_disk_threshold(bookie_config: BookieStorageConfig) -> None:
    usage = {"used": 10, "total": 100}
    config = dataclasses.replace(
        bookie_config, disk_usage_function=lambda _path: (usage["used"], usage["total"])
    )
    async with open_bookie_storage(config) as storage:
        await storage.add_entry(1, 0, -1, b"before")
        usage["used"] = 96
        assert await storage.check_disk()
        assert storage.is_read_only() and storage.disk_usage() == (96, 100)
        with pytest.raises(BookieReadOnlyError):
            await storage.add_entry(1, 1, 0, b"refused")
        assert await storage.read_entry(1, 0) == b"before"  # reads keep working
        usage["used"] = 92  # between warn and limit: stays read-only (hysteresis)
        assert await storage.check_disk()
        usage["used"] = 50
        assert not await storage.check_disk()
        await storage.add_entry(1, 1, 0, b"accepted again")


async def test_read_only_detected_by_background_check(bookie_config: BookieStorageConfig) -> None:
    usage = {"used": 99}
    config = dataclasses.replace(
        bookie_config,
        disk_usage_function=lambda _path: (usage["used"], 100),
        disk_check_interval_s=0.01,
    )
    async with open_bookie_storage(config) as storage:
        assert storage.is_read_only()  # checked at start-up too
        with pytest.raises(BookieReadOnlyError):
            await storage.add_entry(1, 0, -1, b"x")
        with pytest.raises(BookieReadOnlyError):
            await storage.fence(1)
        usage["used"] = 10
        await eventually(lambda: not storage.is_read_only())
        await storage.add_entry(1, 0, -1, b"x")
        usage["used"] = 97
        await eventually(storage.is_read_only)


async def test_damaged_mark_falls_back_to_full_replay(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await storage.add_entry(1, 0, -1, b"checkpointed")
        await storage.checkpoint()
        await storage.add_entry(1, 1, 0, b"only in the journal")
        crash_image = bookie_config.data_dir.with_name("crash-image")
        shutil.copytree(bookie_config.data_dir, crash_image)
    mark = crash_image / "ledgers" / "checkpoint.mark"
    mark.write_bytes(mark.read_bytes()[:-1] + b"\xff")
    config = dataclasses.replace(bookie_config, data_dir=crash_image)
    async with open_bookie_storage(config) as storage:
        assert await storage.read_entry(1, 0) == b"checkpointed"
        assert await storage.read_entry(1, 1) == b"only in the journal"


async def test_write_cache_stays_bounded(bookie_config: BookieStorageConfig) -> None:
    config = dataclasses.replace(bookie_config, write_cache_bytes=64 * 1024)
    async with open_bookie_storage(config) as storage:
        peak = 0
        real_put = storage.write_cache.put

        def watching_put(ledger: int, entry: int, data: bytes) -> None:
            nonlocal peak
            real_put(ledger, entry, data)
            peak = max(peak, storage.write_cache.active_bytes + storage.write_cache.flushing_bytes)

        storage.write_cache.put = watching_put  # type: ignore[method-assign,assignment]
        async with trio.open_nursery() as nursery:
            for ledger in range(8):
                nursery.start_soon(add_many, storage, ledger + 1, 40, 1000)
        assert peak <= 64 * 1024
        assert storage.stats.checkpoints > 3  # flushes were forced by the full cache
        for ledger in range(8):
            assert await storage.read_entry(ledger + 1, 39) == payload(ledger + 1, 39, 1000)


async def test_index_log_is_rewritten_when_mostly_dead(bookie_config: BookieStorageConfig) -> None:
    config = dataclasses.replace(bookie_config, index_log_rewrite_ratio=0.001)
    async with open_bookie_storage(config) as storage:
        await add_many(storage, 1, 10)
        await storage.checkpoint()
        first = storage.index_log.generation
        await add_many(storage, 2, 10)
        await storage.checkpoint()
        assert storage.index_log.generation > first
    async with open_bookie_storage(config) as storage:
        assert await storage.read_entry(1, 9) == payload(1, 9)
        assert await storage.read_entry(2, 9) == payload(2, 9)
