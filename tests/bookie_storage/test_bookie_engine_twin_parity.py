"""The same contract checks against the durable engine and the in-memory twin, so the two
cannot drift apart on what the bookie server observes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import (
    BookieStorage,
    BookieStorageConfig,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)

StorageFactory = Callable[[BookieStorageConfig], AbstractAsyncContextManager[BookieStorage]]


@asynccontextmanager
async def memory_twin(_config: BookieStorageConfig) -> AsyncIterator[BookieStorage]:
    yield MemoryBookieStorage()


@asynccontextmanager
async def durable_engine(config: BookieStorageConfig) -> AsyncIterator[BookieStorage]:
    async with open_bookie_storage(config) as storage:
        yield storage


@pytest.fixture(params=[durable_engine, memory_twin], ids=["durable", "memory"])
def open_storage(request: pytest.FixtureRequest) -> StorageFactory:
    return request.param  # type: ignore[no-any-return]


async def test_contract_adds_reads_lac(
    open_storage: StorageFactory, bookie_config: BookieStorageConfig
) -> None:
    async with open_storage(bookie_config) as storage:
        with pytest.raises(NoSuchLedgerError):
            await storage.read_entry(1, 0)
        with pytest.raises(NoSuchLedgerError):
            storage.last_add_confirmed(1)
        assert storage.last_entry_id(1) == -1
        await storage.add_entry(1, 0, -1, b"e0")
        await storage.add_entry(1, 2, 0, b"e2")  # striping leaves holes: fine
        await storage.add_entry(1, 1, 0, b"e1")  # out of order: LAC stays the max seen
        assert await storage.read_entry(1, 2) == b"e2"
        with pytest.raises(NoSuchEntryError):
            await storage.read_entry(1, 3)
        assert storage.last_add_confirmed(1) == 0
        assert storage.last_entry_id(1) == 2
        assert storage.ledger_ids() == [1]
        assert not storage.is_read_only()
        used, total = storage.disk_usage()
        assert 0 <= used <= total
        assert await storage.wait_for_lac_update(2, -1, 0.01) == -1
        assert await storage.wait_for_lac_update(1, -1, 0.01) == 0
        await storage.checkpoint()
        assert await storage.read_entry(1, 1) == b"e1"


async def test_contract_fencing(
    open_storage: StorageFactory, bookie_config: BookieStorageConfig
) -> None:
    async with open_storage(bookie_config) as storage:
        await storage.add_entry(3, 0, -1, b"a")
        await storage.add_entry(3, 1, 0, b"b")
        assert await storage.fence(3) == 0
        assert storage.is_fenced(3)
        with pytest.raises(LedgerFencedError):
            await storage.add_entry(3, 2, 1, b"c")
        await storage.add_entry(3, 2, 1, b"c", recovery_add=True)
        assert await storage.read_entry(3, 2) == b"c"
        assert await storage.fence(4) == -1  # never seen: fenced all the same
        assert storage.is_fenced(4)
        assert 4 in storage.ledger_ids()


async def test_contract_delete(
    open_storage: StorageFactory, bookie_config: BookieStorageConfig
) -> None:
    async with open_storage(bookie_config) as storage:
        await storage.add_entry(5, 0, -1, b"a")
        await storage.add_entry(6, 0, -1, b"b")
        await storage.delete_ledger(5)
        with pytest.raises(NoSuchLedgerError):
            await storage.read_entry(5, 0)
        with pytest.raises(LedgerFencedError):
            await storage.add_entry(5, 1, 0, b"from a deposed writer")
        assert storage.ledger_ids() == [6]
        assert not storage.is_fenced(5)


async def test_contract_long_poll_wakes_on_add(
    open_storage: StorageFactory, bookie_config: BookieStorageConfig
) -> None:
    async with open_storage(bookie_config) as storage:
        seen: list[int] = []

        async def poll() -> None:
            seen.append(await storage.wait_for_lac_update(7, 0, 10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await storage.add_entry(7, 0, -1, b"x")
            await storage.add_entry(7, 1, 0, b"y")
            await storage.add_entry(7, 2, 1, b"z")
        assert seen == [1]
