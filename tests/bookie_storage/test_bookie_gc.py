"""Garbage collection of dead entry logs and minor/major compaction of sparse ones."""

from __future__ import annotations

import dataclasses

import trio

from ledger_backend.bookie.entry_log import EntryLogWriter, split_location
from ledger_backend.bookie.storage import DurableBookieStorage, open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


def payload(ledger: int, entry: int) -> bytes:
    return (f"{ledger}/{entry}|".encode() * 300)[:1000]


async def fill(storage: DurableBookieStorage, ledgers: list[int], count: int) -> None:
    """Interleave the ledgers' adds, then checkpoint: they share the same entry logs."""

    async def one(ledger: int) -> None:
        for e in range(count):
            await storage.add_entry(ledger, e, e - 1, payload(ledger, e))

    async with trio.open_nursery() as nursery:
        for ledger in ledgers:
            nursery.start_soon(one, ledger)
    await storage.checkpoint()


def logs_of(storage: DurableBookieStorage, ledger: int) -> set[int]:
    idx = storage.index.ledger(ledger)
    assert idx is not None
    return {split_location(loc)[0] for _, loc, _ in idx.items()}


async def test_gc_removes_logs_of_deleted_ledgers_only(bookie_config: BookieStorageConfig) -> None:
    config = dataclasses.replace(bookie_config, entry_log_max_bytes=16 * 1024)
    async with open_bookie_storage(config) as storage:
        await fill(storage, [1], 40)
        await fill(storage, [2], 40)
        live_logs = logs_of(storage, 2)
        dead_logs = logs_of(storage, 1) - live_logs
        assert len(dead_logs) >= 2
        await storage.delete_ledger(1)
        result = await storage.garbage_collect()
        assert dead_logs <= set(result.logs_removed)
        on_disk = set(storage.logs.log_ids())
        assert not (dead_logs & on_disk) and live_logs <= on_disk
        for e in range(40):
            assert await storage.read_entry(2, e) == payload(2, e)
    async with open_bookie_storage(config) as storage:
        assert storage.ledger_ids() == [2]
        for e in range(40):
            assert await storage.read_entry(2, e) == payload(2, e)


async def test_gc_deletes_ledgers_the_metadata_no_longer_has(
    bookie_config: BookieStorageConfig,
) -> None:
    active = {1, 2, 3}

    async def active_ledgers() -> set[int]:
        return set(active)

    async with open_bookie_storage(bookie_config, active_ledgers) as storage:
        await fill(storage, [1, 2, 3], 10)
        active.discard(2)
        result = await storage.gc.collect()
        assert result.ledgers_deleted == [2]
        assert storage.ledger_ids() == [1, 3]
        assert await storage.read_entry(3, 9) == payload(3, 9)
    async with open_bookie_storage(bookie_config, active_ledgers) as storage:
        assert storage.ledger_ids() == [1, 3]


async def test_minor_and_major_compaction(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await fill(storage, [1, 2], 50)  # one log, half ledger 1, half ledger 2
        [old_log] = logs_of(storage, 1)
        await fill(storage, [3], 5)  # still the same current log; start a new one:
        storage.writer.close()
        storage.writer = EntryLogWriter(storage.logs, max_bytes=bookie_config.entry_log_max_bytes)
        await storage.delete_ledger(1)
        await storage.checkpoint()
        fraction = storage.gc.live_fraction(old_log)
        assert 0.4 < fraction < 0.6
        minor = await storage.compact()
        assert minor.logs_compacted == []
        major = await storage.compact(major=True)
        assert major.logs_compacted == [old_log] and major.entries_moved == 55
        assert old_log not in storage.logs.log_ids()
        assert old_log not in logs_of(storage, 2)
        for e in range(50):
            assert await storage.read_entry(2, e) == payload(2, e)
    async with open_bookie_storage(bookie_config) as storage:
        for e in range(50):
            assert await storage.read_entry(2, e) == payload(2, e)
        assert await storage.read_entry(3, 4) == payload(3, 4)


async def test_gc_keeps_the_log_being_written(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await fill(storage, [1], 5)
        current = storage.writer.current_log_id
        await storage.delete_ledger(1)
        result = await storage.gc.collect()
        assert current not in result.logs_removed
        await fill(storage, [2], 5)
        assert await storage.read_entry(2, 4) == payload(2, 4)


async def test_compaction_leaves_an_entry_rewritten_during_the_copy(
    bookie_config: BookieStorageConfig,
) -> None:
    async with open_bookie_storage(bookie_config) as storage:
        await fill(storage, [1, 2], 20)
        [old_log] = logs_of(storage, 2)
        storage.writer.close()
        storage.writer = EntryLogWriter(storage.logs, max_bytes=bookie_config.entry_log_max_bytes)
        await storage.delete_ledger(1)
        await storage.checkpoint()

        async def rewrite_meanwhile() -> None:
            await storage.add_entry(2, 5, 4, b"rewritten during compaction", recovery_add=True)
            await storage.checkpoint()  # the copy does not hold the checkpoint lock

        real_copy = storage.gc._copy_blocking

        def copy_then_rewrite(
            writer: EntryLogWriter, rows: list[tuple[int, int, int, int]]
        ) -> list[int]:
            locations = real_copy(writer, rows)
            trio.from_thread.run(rewrite_meanwhile)
            return locations

        storage.gc._copy_blocking = copy_then_rewrite  # type: ignore[method-assign]
        result = await storage.gc.compact(0.8)
        assert result.logs_compacted == [old_log] and result.entries_moved == 19
        assert old_log not in storage.logs.log_ids()
        storage.read_cache.drop_ledger(2)
        assert await storage.read_entry(2, 5) == b"rewritten during compaction"
        assert await storage.read_entry(2, 6) == payload(2, 6)
    async with open_bookie_storage(bookie_config) as storage:
        assert await storage.read_entry(2, 5) == b"rewritten during compaction"
        for e in (0, 4, 6, 19):
            assert await storage.read_entry(2, e) == payload(2, e)
