"""A new managed ledger is created in one metadata write (factory.py), on real bookies.

Its node, cursors directory, first ledger's metadata and the caller's nodes go in one multi();
the ledger's id comes from a block reserved on the shared counter (client/ledger_ids.py).
A concurrent creator, or a caller node that is already there, falls back to the general path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.client.ledger_ids import LedgerIdBlocks
from ledger_backend.client.ledger_metadata import LEDGER_ID_COUNTER_PATH, ledger_path
from ledger_backend.managed_ledger import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerFencedError,
)
from ledger_backend.metadata import MetadataStore
from ledger_backend.metadata.store import CreateOp, Op, OpResult, SessionState, Stat, Watcher
from tests.managed_ledger.ml_test_support import FakeClock
from tests.managed_ledger.test_managed_ledger_on_bookies import bookies

CONFIG = ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)


class CountingStore(MetadataStore):
    """A store that counts the writes reaching the one it wraps (create, set, delete, multi,
    next_id); reads, watches and sessions are the wrapped store's."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:  # what a store has beyond the interface
        return getattr(self._inner, name)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        return await self._inner.get(path)

    async def exists(self, path: str) -> Stat | None:
        return await self._inner.exists(path)

    async def children(self, path: str) -> list[str]:
        return await self._inner.children(path)

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        return self._inner.watch(path, children=children)

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        return self._inner.session_events()

    async def close(self) -> None:
        await self._inner.close()

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        self.writes.append(f"create {path}")
        return await self._inner.create(path, data, ephemeral=ephemeral,
                                        sequential=sequential, make_parents=make_parents)

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        self.writes.append(f"set {path}")
        return await self._inner.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self.writes.append(f"delete {path}")
        await self._inner.delete(path, version, recursive=recursive)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        self.writes.append(f"multi of {len(ops)}")
        return await self._inner.multi(ops)

    async def next_id(self, path: str) -> int:
        self.writes.append(f"next_id {path}")
        return await self._inner.next_id(path)


@pytest.fixture
async def counted(store: MetadataStore) -> AsyncIterator[CountingStore]:
    async with bookies(store, 1):
        yield CountingStore(store)


@pytest.mark.timeout(60)
async def test_a_new_managed_ledger_costs_one_metadata_write(
        counted: CountingStore, clock: FakeClock) -> None:
    async with BookKeeper(counted, timeout_s=10) as bk:
        factory = ManagedLedgerFactory(counted, bk, clock=clock)
        await factory.open("t/warm-up-0", CONFIG)  # root, ledgers dir, an id block
        counted.writes.clear()
        opened = []
        for i in range(20):
            state = CreateOp(f"/state-{i}", b"fresh")
            ml = await factory.open(f"t/new-{i}", CONFIG, create_with=[state])
            assert ml.created_with
            opened.append(ml)
        assert counted.writes == ["multi of 4"] * 20

        for i, ml in enumerate(opened):  # the ledger is usable and listed
            await ml.append(b"first-%d" % i)
            assert (await counted.get(f"/state-{i}"))[0] == b"fresh"
            assert (await counted.get(ledger_path(ml.current_ledger_id)))[1].version == 0
        ids = [ml.current_ledger_id for ml in opened]
        assert len(set(ids)) == len(ids)
        # a later ledger of the same list comes from next_id, above every reserved id
        later = await bk.create_ledger(1, 1, 1)
        assert later.ledger_id > max(ids)

        again = await factory.open("t/new-0", CONFIG, create_with=[CreateOp("/x", b"")])
        assert again is opened[0] and not again.created_with  # not created by this call
        assert await counted.exists("/x") is None


@pytest.mark.timeout(60)
async def test_a_new_owner_fences_and_keeps_what_the_creator_wrote(
        counted: CountingStore, clock: FakeClock) -> None:
    async with BookKeeper(counted, timeout_s=10) as bk_a, \
            BookKeeper(counted, timeout_s=10) as bk_b:
        ml_a = await ManagedLedgerFactory(counted, bk_a, clock=clock).open(
            "t/moved-0", CONFIG, create_with=[CreateOp("/moved-state", b"")])
        assert ml_a.created_with
        first = await ml_a.append(b"acknowledged")
        # the creator "dies" without closing: the next owner recovers its open ledger
        ml_b = await ManagedLedgerFactory(counted, bk_b, clock=clock).open(
            "t/moved-0", CONFIG, create_with=[CreateOp("/moved-state", b"")])
        assert not ml_b.created_with
        assert [e.data for e in await ml_b.read(first, 10)] == [b"acknowledged"]
        with pytest.raises((LedgerError, ManagedLedgerFencedError)):  # fenced at the bookie
            await ml_a.append(b"from the deposed owner")
        await ml_b.append(b"second")
        assert ml_b.current_ledger_id > ml_a.current_ledger_id


@pytest.mark.timeout(60)
async def test_a_caller_node_already_there_falls_back(
        counted: CountingStore, clock: FakeClock) -> None:
    await counted.create("/left-over", b"old")
    async with BookKeeper(counted, timeout_s=10) as bk:
        factory = ManagedLedgerFactory(counted, bk, clock=clock)
        ml = await factory.open("t/fallback-0", CONFIG,
                                create_with=[CreateOp("/left-over", b"new")])
        assert not ml.created_with
        assert (await counted.get("/left-over"))[0] == b"old"
        position = await ml.append(b"works")
        assert [e.data for e in await ml.read(position, 1)] == [b"works"]
        # the id reserved for the failed multi is never used: no ledger metadata was written
        assert await counted.children("/ledgerwire/ledgers") == [
            ledger_path(ml.current_ledger_id).rsplit("/", 1)[1]]


async def test_id_blocks_never_repeat_across_clients(store: MetadataStore) -> None:
    clients = [LedgerIdBlocks(store, LEDGER_ID_COUNTER_PATH, block=7) for _ in range(3)]
    taken: list[int] = []

    async def take(blocks: LedgerIdBlocks, count: int) -> None:
        for _ in range(count):
            taken.append(await blocks.take())

    async with trio.open_nursery() as nursery:
        for blocks in clients:
            nursery.start_soon(take, blocks, 20)
        nursery.start_soon(take_next_ids, store, taken, 10)
    assert len(taken) == 70 and len(set(taken)) == 70
    assert await store.next_id(LEDGER_ID_COUNTER_PATH) > max(taken)


async def take_next_ids(store: MetadataStore, taken: list[int], count: int) -> None:
    for _ in range(count):
        taken.append(await store.next_id(LEDGER_ID_COUNTER_PATH))
