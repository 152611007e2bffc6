"""Managed ledger on the real ledger client and real bookie servers (in-process, TCP, port 0)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState, ledger_path
from ledger_backend.managed_ledger import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerFencedError,
    Position,
)
from ledger_backend.managed_ledger.metadata_format import decode_managed_ledger
from ledger_backend.metadata import MetadataStore
from tests.managed_ledger.ml_test_support import FakeClock


@asynccontextmanager
async def bookies(store: MetadataStore, count: int) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            await nursery.start(serve_bookie, MemoryBookieStorage(), store, "127.0.0.1", 0)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


@pytest.mark.timeout(60)
async def test_managed_ledger_on_real_bookies(store: MetadataStore, clock: FakeClock) -> None:
    config = ManagedLedgerConfig(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        max_entries_per_ledger=10,
        tail_cache_bytes=0,  # force reads through the bookies, also for the open ledger
    )
    name = "public/default/orders-0"
    async with bookies(store, 3), BookKeeper(store, timeout_s=5) as bk_a:
        ml = await ManagedLedgerFactory(store, bk_a, clock=clock).open(name, config)
        call_order: list[int] = []
        results: dict[int, Position] = {}

        async def append_one(i: int) -> None:
            call_order.append(i)
            results[i] = await ml.append(b"msg-%d" % i)

        async with trio.open_nursery() as nursery:
            for i in range(35):
                nursery.start_soon(append_one, i)
        in_call_order = [results[i] for i in call_order]
        assert in_call_order == sorted(in_call_order)
        assert [info.entries for info in ml.ledgers] == [10, 10, 10, 5]
        expected = [b"msg-%d" % i for i in call_order]
        read = await ml.read(ml.first_position, 100)  # type: ignore[arg-type]
        assert [e.data for e in read] == expected

        # crash: ml is never closed; a second broker with its own client takes over
        async with BookKeeper(store, timeout_s=5) as bk_b:
            ml_b = await ManagedLedgerFactory(store, bk_b, clock=clock).open(name, config)
            assert [info.entries for info in ml_b.ledgers] == [10, 10, 10, 5, 0]
            read_b = await ml_b.read(ml_b.first_position, 100)  # type: ignore[arg-type]
            assert [e.data for e in read_b] == expected
            with pytest.raises(ManagedLedgerFencedError):
                await ml.append(b"zombie")
            after = await ml_b.append(b"new owner")
            assert after.ledger_id == ml_b.current_ledger_id
            await ml_b.close()

            ml_c = await ManagedLedgerFactory(store, bk_b, clock=clock).open(name, config)
            read_c = await ml_c.read(ml_c.first_position, 100)  # type: ignore[arg-type]
            assert [e.data for e in read_c] == [*expected, b"new owner"]
            await ml_c.close()


def _count_writes(store: MetadataStore) -> list[str]:
    """Every set() and multi() on `store` from now on, by name."""
    writes: list[str] = []
    plain_set, plain_multi = store.set, store.multi

    async def counted_set(*args, **kwargs):  # type: ignore[no-untyped-def]
        writes.append("set")
        return await plain_set(*args, **kwargs)

    async def counted_multi(*args, **kwargs):  # type: ignore[no-untyped-def]
        writes.append("multi")
        return await plain_multi(*args, **kwargs)

    store.set, store.multi = counted_set, counted_multi  # type: ignore[method-assign]
    return writes


@pytest.mark.timeout(60)
async def test_close_records_the_closed_ledger_in_one_metadata_write(
        store: MetadataStore, clock: FakeClock) -> None:  # fmt: skip
    """A managed ledger's close writes the ledger's CLOSED state and its own list in one
    transaction; the next open finds both and needs no recovery."""
    config = ManagedLedgerConfig(ensemble_size=2, write_quorum=2, ack_quorum=2)
    async with bookies(store, 2), BookKeeper(store, timeout_s=5) as bk:
        factory = ManagedLedgerFactory(store, bk, clock=clock)
        ml = await factory.open("public/default/t-0", config)
        for i in range(3):
            await ml.append(b"m%d" % i)
        lid, path = ml.current_ledger_id, ml._path
        writes = _count_writes(store)
        await ml.close()
        assert writes == ["multi"]
        ledger = LedgerMetadata.from_json_bytes((await store.get(ledger_path(lid)))[0])
        assert ledger.state is LedgerState.CLOSED and ledger.last_entry_id == 2
        node = decode_managed_ledger((await store.get(path))[0], path)
        assert [(r.ledger_id, r.entries, r.closed) for r in node.ledgers] == [(lid, 3, True)]
        again = await factory.open("public/default/t-0", config)
        assert [info.entries for info in again.ledgers] == [3, 0]
        assert [e.data for e in await again.read(again.first_position, 10)] == [  # type: ignore[arg-type]
            b"m0", b"m1", b"m2"]
        await again.close()


@pytest.mark.timeout(60)
async def test_close_after_another_owner_wrote_the_list_closes_the_ledger_alone(
        store: MetadataStore, clock: FakeClock) -> None:  # fmt: skip
    """The one-transaction close refused (the list changed under us): the ledger is still
    closed at its last entry, the list is not overwritten, and the managed ledger is fenced."""
    config = ManagedLedgerConfig(ensemble_size=2, write_quorum=2, ack_quorum=2)
    async with bookies(store, 2), BookKeeper(store, timeout_s=5) as bk:
        ml = await ManagedLedgerFactory(store, bk, clock=clock).open("public/default/t-1",
                                                                      config)
        await ml.append(b"m0")
        lid, path = ml.current_ledger_id, ml._path
        theirs, stat = await store.get(path)
        await store.set(path, theirs, stat.version)  # another owner's write
        await ml.close()
        ledger = LedgerMetadata.from_json_bytes((await store.get(ledger_path(lid)))[0])
        assert ledger.state is LedgerState.CLOSED and ledger.last_entry_id == 0
        data, now = await store.get(path)
        assert data == theirs and now.version == stat.version + 1
        assert ml.is_fenced
