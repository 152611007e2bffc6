"""The compacted state logs (committed offsets, transaction state): replay, snapshots, trimming."""

from __future__ import annotations

import trio
import trio.lowlevel

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.coordinator.transaction_store import LedgerTransactionStore
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset


async def test_offsets_survive_reopen_across_snapshots_and_old_ledgers_go() -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        config = ManagedLedgerConfig(max_entries_per_ledger=2)  # a ledger every two records
        offsets = LedgerOffsetStore(factory, config, snapshot_every=3)
        assert await offsets.load() == {}
        for i in range(10):
            await offsets.commit("g", {("t", i % 3): CommittedOffset(i, metadata=f"m{i}")})
        await offsets.delete("g", [("t", 0)])
        await offsets.commit("h", {("u", 0): CommittedOffset(5)})
        ledger = await factory.open("__system/offsets/__consumer_offsets", config)
        assert len(ledger.ledgers) <= 3, "ledgers before the latest snapshot are deleted"
        await offsets.close()

        again = LedgerOffsetStore(factory, config, snapshot_every=3)
        assert await again.load() == {
            "g": {("t", 1): CommittedOffset(7, metadata="m7"),
                  ("t", 2): CommittedOffset(8, metadata="m8")},
            "h": {("u", 0): CommittedOffset(5)},
        }
        await again.close()


async def test_group_metadata_survives_reopen_across_snapshots() -> None:
    """The latest record per group id survives snapshots and trimming; a tombstone removes
    it; deleting a group's offsets leaves its metadata."""
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        config = ManagedLedgerConfig(max_entries_per_ledger=2)
        offsets = LedgerOffsetStore(factory, config, snapshot_every=3)
        await offsets.load()
        assert await offsets.load_groups() == {}
        for generation in range(1, 6):
            await offsets.store_group("g", {"gv": 1, "generation": generation})
            await offsets.commit("g", {("t", 0): CommittedOffset(generation)})
        await offsets.store_group("gone", {"gv": 1, "generation": 1})
        await offsets.store_group("gone", None)
        await offsets.delete("g", None)
        await offsets.store_group("h", {"gv": 1, "generation": 9})
        await offsets.close()

        again = LedgerOffsetStore(factory, config, snapshot_every=3)
        assert await again.load() == {}
        assert await again.load_groups() == {"g": {"gv": 1, "generation": 5},
                                             "h": {"gv": 1, "generation": 9}}
        await again.snapshot()  # the snapshot alone holds them
        await again.close()
        last = LedgerOffsetStore(factory, config)
        await last.load()
        assert set(await last.load_groups()) == {"g", "h"}
        await last.close()


async def test_transaction_state_replays_to_the_last_record_per_id() -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        txns = LedgerTransactionStore(factory, snapshot_every=4)
        await txns.load()
        for i in range(9):
            await txns.write(f"id-{i % 2}", {"state": "Ongoing", "epoch": i})
        await txns.delete("id-0")
        await txns.close()
        again = LedgerTransactionStore(factory, snapshot_every=4)
        assert await again.load() == {"id-1": {"state": "Ongoing", "epoch": 7}}
        await again.close()


async def test_a_change_in_flight_when_the_log_closes_succeeds_durably() -> None:
    """close() lets an append in flight finish (the RocketMQ offsets' writer task can be in one
    when its bundle is released): the change is durable, so it must not fail, nor its snapshot
    falling due meet a closed log (it raised AttributeError or ManagedLedgerClosedError, which
    the writer logged as a failed commit, with a traceback).  Trio runs the two tasks' next
    steps in either order: 20 rounds see both."""
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        for round_ in range(20):
            offsets = LedgerOffsetStore(factory, None, ledger_name=f"o{round_}",
                                        snapshot_every=1)
            await offsets.load()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(offsets.commit, "g", {("t", 0): CommittedOffset(round_)})
                await trio.lowlevel.checkpoint()  # the append is in flight
                nursery.start_soon(offsets.close)
            again = LedgerOffsetStore(factory, None, ledger_name=f"o{round_}")
            assert await again.load() == {"g": {("t", 0): CommittedOffset(round_)}}
            await again.close()
