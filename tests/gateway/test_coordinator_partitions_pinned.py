"""A one-process data directory keeps the coordinator partition counts it first ran with
(partitioned_offsets.node_layout), whatever ClusterLayout's defaults are at a later start: a
group's partition is crc32(id) mod the count, so a changed count would route its records to
another ledger and its committed offsets would look lost.  A later `--workers N` layout copies
the pinned counts and still derives its bundle count from N."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cluster.broker_registry import ClusterLayout
from gateway.config.loading import load_config
from gateway.coordinator.partitioned_offsets import (
    PartitionedOffsetStore,
    node_layout,
    pinned_layout,
)
from gateway.process.supervisor import cluster_layout
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset

GROUPS = [f"group-{i}" for i in range(40)]  # spread over every one of 8 partitions


def change_defaults(monkeypatch: pytest.MonkeyPatch, group_partitions: int,
                    txn_partitions: int) -> None:
    """What a later release with other ClusterLayout defaults would construct."""
    cluster_id, bundles, _, _ = ClusterLayout.__init__.__defaults__  # type: ignore[misc]
    monkeypatch.setattr(ClusterLayout.__init__, "__defaults__",
                        (cluster_id, bundles, group_partitions, txn_partitions))
    assert ClusterLayout().group_partitions == group_partitions


async def test_groups_route_as_at_the_first_start_after_the_defaults_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledgers = await open_store("memory:")
    async with MemoryBookKeeper(ledgers) as bk:
        factory = ManagedLedgerFactory(ledgers, bk)
        store = await open_store(f"embedded:{tmp_path / 'metadata'}")
        first = await node_layout(store)  # the first start of the directory
        await store.close()
        assert (first.group_partitions, first.txn_partitions) == (8, 8)
        offsets = PartitionedOffsetStore(factory, None, first.group_partitions)
        await offsets.load()
        for i, group in enumerate(GROUPS):
            await offsets.commit(group, {("t", 0): CommittedOffset(i + 1, -1, "", 1_000)})
        await offsets.close()

        change_defaults(monkeypatch, 3, 5)
        store = await open_store(f"embedded:{tmp_path / 'metadata'}")
        again = await node_layout(store)  # the next start, under the new defaults
        # a later `--workers 8` node: the pinned counts, its own bundle count
        workers = await pinned_layout(store, cluster_layout(load_config(None), 8))
        await store.close()
        assert (again.group_partitions, again.txn_partitions) == (8, 8)
        assert (workers.bundles, workers.group_partitions, workers.txn_partitions) == (32, 8, 8)
        offsets = PartitionedOffsetStore(factory, None, again.group_partitions)
        state = await offsets.load()
        await offsets.close()
        assert {g: state.get(g, {}).get(("t", 0), CommittedOffset(0, -1, "", 0)).offset
                for g in GROUPS} == {g: i + 1 for i, g in enumerate(GROUPS)}


async def test_a_new_directory_takes_the_defaults_of_its_first_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    change_defaults(monkeypatch, 3, 5)
    store = await open_store(f"embedded:{tmp_path / 'metadata'}")
    try:
        layout = await node_layout(store)
        assert (layout.group_partitions, layout.txn_partitions) == (3, 5)
        assert await node_layout(store) == layout
    finally:
        await store.close()
