"""MemoryBookKeeper keeps the ledger client's contract: ids, in-order acks, fencing, closing."""

from __future__ import annotations

import pytest
import trio

from ledger_backend.client.errors import (
    InvalidQuorumError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from ledger_backend.client.ledger_metadata import LedgerState
from ledger_backend.client.memory import MemoryBookKeeper, MemoryLedgerCluster


async def test_append_read_close_roundtrip() -> None:
    async with MemoryBookKeeper() as bk:
        wh = await bk.create_ledger(3, 2, 2, custom_metadata={"owner": b"\x00\x01"})
        assert [await wh.append(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        assert wh.last_add_confirmed == 4
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert rh.is_closed and rh.last_add_confirmed == 4
        assert rh.metadata.state is LedgerState.CLOSED
        assert rh.metadata.length == sum(len(b"e%d" % i) for i in range(5))
        assert rh.metadata.custom_metadata == {"owner": b"\x00\x01"}
        assert await rh.read(1, 3) == [b"e1", b"e2", b"e3"]
        with pytest.raises(NoSuchEntryError):
            await rh.read(4, 5)
        with pytest.raises(LedgerClosedError):
            await wh.append(b"late")


async def test_concurrent_appends_get_call_order_ids() -> None:
    async with MemoryBookKeeper() as bk:
        wh = await bk.create_ledger(1, 1, 1)
        results: dict[int, int] = {}

        async def add(i: int) -> None:
            results[i] = await wh.append(b"%d" % i)

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(add, i)
        # Trio starts tasks in any order; each id must name the entry holding that task's data.
        assert sorted(results.values()) == list(range(20))
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        stored = await rh.read(0, 19)
        assert all(stored[entry_id] == b"%d" % i for i, entry_id in results.items())


async def test_recovery_open_fences_old_writer_and_closes_at_lac() -> None:
    cluster = MemoryLedgerCluster()
    async with MemoryBookKeeper(cluster=cluster) as bk_a, MemoryBookKeeper(cluster=cluster) as bk_b:
        wh = await bk_a.create_ledger(2, 2, 1)
        for i in range(3):
            await wh.append(b"x%d" % i)
        rh = await bk_b.open_ledger(wh.ledger_id, recovery=True)
        assert rh.is_closed and rh.last_add_confirmed == 2
        with pytest.raises(LedgerFencedError):
            await wh.append(b"after fence")
        with pytest.raises(LedgerFencedError):
            await wh.close()
        assert await rh.read(0, 2) == [b"x0", b"x1", b"x2"]


async def test_wait_for_lac_long_poll_and_timeout() -> None:
    async with MemoryBookKeeper() as bk:
        wh = await bk.create_ledger(1, 1, 1)
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert await rh.wait_for_lac(-1, 0.05) == -1
        async with trio.open_nursery() as nursery:

            async def later() -> None:
                await trio.sleep(0.01)
                await wh.append(b"a")

            nursery.start_soon(later)
            assert await rh.wait_for_lac(-1, 5) == 0


async def test_delete_and_list_and_quorum_validation() -> None:
    async with MemoryBookKeeper() as bk:
        with pytest.raises(InvalidQuorumError):
            await bk.create_ledger(1, 2, 1)
        a = await bk.create_ledger(1, 1, 1)
        b = await bk.create_ledger(1, 1, 1)
        assert await bk.list_ledgers() == sorted([a.ledger_id, b.ledger_id])
        await bk.delete_ledger(a.ledger_id)
        assert await bk.list_ledgers() == [b.ledger_id]
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(a.ledger_id, recovery=False)


async def test_instances_on_one_store_share_ledgers_and_ids() -> None:
    from ledger_backend.metadata import open_store

    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as broker_a, MemoryBookKeeper(store) as broker_b:
            first = await broker_a.create_ledger(1, 1, 1)
            second = await broker_b.create_ledger(1, 1, 1)
            assert (first.ledger_id, second.ledger_id) == (1, 2)  # store.next_id
            await first.append(b"x")
            rh = await broker_b.open_ledger(first.ledger_id, recovery=True)
            assert rh.is_closed and await rh.read(0, 0) == [b"x"]
            with pytest.raises(LedgerFencedError):
                await first.append(b"y")
    finally:
        await store.close()
