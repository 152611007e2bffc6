"""BookieStorage contract semantics, checked on MemoryBookieStorage and on the durable engine
(same observable behaviour: fencing, recovery adds, LAC, long-poll waits, read-only, delete)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.storage_api import (
    BookieStorage,
    BookieStorageConfig,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)


@pytest.fixture(params=["memory", "durable"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BookieStorage]:
    if request.param == "memory":
        yield MemoryBookieStorage()
        return
    from ledger_backend.bookie.storage import open_bookie_storage

    async with open_bookie_storage(BookieStorageConfig(tmp_path, fsync=False)) as durable:
        yield durable


async def test_add_read_and_lac(storage: BookieStorage) -> None:
    with pytest.raises(NoSuchLedgerError):
        await storage.read_entry(1, 0)
    with pytest.raises(NoSuchLedgerError):
        storage.last_add_confirmed(1)
    await storage.add_entry(1, 0, -1, b"a")
    await storage.add_entry(1, 1, 0, b"b")
    await storage.add_entry(1, 2, 1, b"c")
    assert await storage.read_entry(1, 1) == b"b"
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(1, 3)
    assert storage.last_add_confirmed(1) == 1
    assert storage.last_entry_id(1) == 2
    assert 1 in storage.ledger_ids()


async def test_fence_blocks_writer_but_not_recovery(storage: BookieStorage) -> None:
    await storage.add_entry(2, 0, -1, b"a")
    await storage.add_entry(2, 1, 0, b"b")
    assert not storage.is_fenced(2)
    assert await storage.fence(2) == 0
    assert storage.is_fenced(2)
    with pytest.raises(LedgerFencedError):
        await storage.add_entry(2, 2, 1, b"late")
    await storage.add_entry(2, 1, 0, b"b", recovery_add=True)
    assert await storage.read_entry(2, 1) == b"b"


async def test_fencing_an_unknown_ledger_stops_its_writer(storage: BookieStorage) -> None:
    assert await storage.fence(30) == -1
    with pytest.raises(LedgerFencedError):
        await storage.add_entry(30, 0, -1, b"x")


async def test_wait_for_lac_update(storage: BookieStorage) -> None:
    await storage.add_entry(3, 0, -1, b"a")
    seen: list[int] = []

    async def waiter() -> None:
        seen.append(await storage.wait_for_lac_update(3, -1, 5.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.01)
        assert seen == []
        await storage.add_entry(3, 1, 0, b"b")
    assert seen == [0]
    # already above: immediate; nothing new: the current LAC after the timeout
    assert await storage.wait_for_lac_update(3, -1, 5.0) == 0
    with trio.fail_after(2):
        assert await storage.wait_for_lac_update(3, 0, 0.02) == 0


async def test_delete_ledger(storage: BookieStorage) -> None:
    await storage.add_entry(4, 0, -1, b"a")
    await storage.delete_ledger(4)
    assert 4 not in storage.ledger_ids()
    with pytest.raises(NoSuchLedgerError):
        await storage.read_entry(4, 0)


async def test_disk_usage_and_read_only_flag(storage: BookieStorage) -> None:
    used, total = storage.disk_usage()
    assert 0 <= used <= total and total > 0
    assert storage.is_read_only() is False


async def test_memory_twin_read_only_refuses_writes_and_fences() -> None:
    from ledger_backend.bookie.storage_api import BookieReadOnlyError

    storage = MemoryBookieStorage()
    await storage.add_entry(5, 0, -1, b"a")
    storage.set_read_only(True)
    with pytest.raises(BookieReadOnlyError):
        await storage.add_entry(5, 1, 0, b"b")
    with pytest.raises(BookieReadOnlyError):
        await storage.fence(5)
    assert await storage.read_entry(5, 0) == b"a"
