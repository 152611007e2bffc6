"""RocketMQ consumer offsets move with a data directory between `--workers 1` and `--workers N`
(gateway/rocketmq/offset_layout.py): what a one-process standalone's broker committed (RocketMQ
topic, queue id = partition, in the single ledger) is what each bundle's offsets answer for the
same storage partition after the split, and back again after the merge; a move repeated after a
crash (its sources not deleted yet) changes nothing.  Read through the real code of each side:
RocketMQOffsets over the single ledger, the cluster's RocketMQOffsetLedgers per bundle."""

from __future__ import annotations

import pytest

from gateway.cluster.bundle_placement import bundle_of
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.bundle_broker import RocketMQOffsetLedgers, offsets_ledger_name
from gateway.rocketmq.offset_layout import merge_bundles, split_into_bundles
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQOffsets
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.rocketmq.topic_names import to_storage

BUNDLES = 16
CONFIG = ManagedLedgerConfig()
# (group, RocketMQ topic, queue id) -> offset, as a one-process broker commits them
COMMITTED = {(f"g{g}", topic, q): 10 * g + q + 1
             for g in range(5) for topic in ("orders", "%RETRY%g1") for q in range(8)}


async def standalone_offsets(factory: ManagedLedgerFactory) -> dict[tuple[str, str, int], int]:
    offsets = RocketMQOffsets(LedgerOffsetStore(factory, CONFIG,
                                                ledger_name=ROCKETMQ_OFFSETS_LEDGER))
    await offsets.load()
    found = {key: offsets.query(*key) for key in COMMITTED}
    await offsets.close()
    return {k: v for k, v in found.items() if v is not None}


async def commit_as_one_process(factory: ManagedLedgerFactory) -> None:
    offsets = RocketMQOffsets(LedgerOffsetStore(factory, CONFIG,
                                                ledger_name=ROCKETMQ_OFFSETS_LEDGER))
    await offsets.load()
    for (group, topic, queue), value in COMMITTED.items():
        await offsets.commit(group, topic, queue, value)
    await offsets.close()


async def bundle_offsets(factory: ManagedLedgerFactory) -> dict[tuple[str, str, int], int]:
    ledgers = RocketMQOffsetLedgers(factory, CONFIG)
    found: dict[tuple[str, str, int], int] = {}
    for bundle in range(BUNDLES):
        await ledgers.acquired(bundle)
    for group, topic, queue in COMMITTED:
        storage = to_storage(topic)
        store = ledgers.store(bundle_of(storage, queue, BUNDLES))
        assert store is not None
        value = store.query(group, storage, queue)
        if value is not None:
            found[(group, topic, queue)] = value
    await ledgers.close_all()
    return found


async def test_offsets_split_into_bundles_and_merge_back() -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        await commit_as_one_process(factory)

        assert await split_into_bundles(factory, CONFIG, BUNDLES)
        assert not await factory.exists(ROCKETMQ_OFFSETS_LEDGER)
        assert await bundle_offsets(factory) == COMMITTED
        assert not await split_into_bundles(factory, CONFIG, BUNDLES)  # nothing left to move

        # a worker commits anew (bundle side), then the directory goes back to one process
        ledgers = RocketMQOffsetLedgers(factory, CONFIG)
        bundle = bundle_of("orders", 3, BUNDLES)
        await ledgers.acquired(bundle)
        moved = ledgers.store(bundle)
        assert moved is not None
        await moved.commit("g0", "orders", 3, 999)
        await ledgers.close_all()
        expected = {**COMMITTED, ("g0", "orders", 3): 999}

        assert await merge_bundles(factory, CONFIG, BUNDLES)
        assert not any([await factory.exists(offsets_ledger_name(b)) for b in range(BUNDLES)])
        assert await standalone_offsets(factory) == expected


async def test_a_move_repeated_before_its_sources_were_deleted_changes_nothing() -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        await commit_as_one_process(factory)
        for move in (split_into_bundles, merge_bundles):
            deletes = factory.delete

            async def crash_before_deleting(name: str) -> None:
                raise RuntimeError("killed before the delete")

            factory.delete = crash_before_deleting  # type: ignore[method-assign]
            with pytest.raises(RuntimeError):
                await move(factory, CONFIG, BUNDLES)
            factory.delete = deletes  # type: ignore[method-assign]
            assert await move(factory, CONFIG, BUNDLES)  # the next start moves them again
            if move is split_into_bundles:
                assert not await factory.exists(ROCKETMQ_OFFSETS_LEDGER)
                assert await bundle_offsets(factory) == COMMITTED
        assert await standalone_offsets(factory) == COMMITTED
