"""Committed offsets of a one-process standalone, in the cluster's coordinator-partition ledgers.

Kafka fixes the number of `__consumer_offsets` partitions for the life of a cluster, whatever
the number of brokers; so does ledgerwire.  A group id belongs to coordinator partition
crc32(id) mod P (bundle_placement.coordinator_partition), whose offsets and group metadata
live in the managed ledger "__system/offsets/__consumer_offsets-<i>" (group_partitions.py),
and P is the layout's `group_partitions` (ClusterLayout: 8; a one-process directory pins the
counts it first ran with, node_layout).  `standalone --workers N` spreads
those partitions over its workers; `--workers 1` (this module) owns them all in one process and
keeps one GroupCoordinator over them: `PartitionedOffsetStore` is the coordinator's offset
store, routing each group's records to its partition's LedgerOffsetStore.  So a data directory
moves between 1 and N workers with every group's committed offsets and metadata.  Data
directories from before (one ledger "__system/offsets/__consumer_offsets") are moved into the
partition ledgers once, at start (single_ledger_migration.py).

Cost: a commit is one crc32 of the group id more than with one ledger; each of the P ledgers
snapshots and trims on its own, so replay at start is bounded by P x snapshot_every records.

This module must never write a group's records to any ledger but its partition's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import trio

from gateway.cluster.broker_registry import CLUSTER_PATH, ClusterLayout
from gateway.cluster.bundle_placement import coordinator_partition
from gateway.coordinator.offset_store import LedgerOffsetStore, group_ledger_name
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey

# The coordinator partition counts a one-process data directory first ran with.  Not the
# layout node (CLUSTER_PATH): that also fixes the bundle count, which a first `--workers N`
# run derives from N (supervisor.cluster_layout); pinning it at a one-process start would cut
# a later 8-worker node into 16 bundles instead of 32.  This node pins only what must never
# change, and the layout node a later `--workers N` run writes copies it (pinned_layout).
PARTITIONS_PATH = "/ledgerwire/coordinator_partitions"


async def node_layout(store: MetadataStore) -> ClusterLayout:
    """The layout in force: the node's layout node if a `--workers N` run (or a cluster) wrote
    one, else ClusterLayout's defaults with the coordinator partition counts this directory
    first ran with (written on its first start, so they never change with the code's
    defaults: a group's partition is crc32(id) mod their count)."""
    try:
        data, _ = await store.get(CLUSTER_PATH)
    except NoNodeError:
        pass
    else:
        return ClusterLayout.from_bytes(data)
    layout = ClusterLayout()
    counts = {"group_partitions": layout.group_partitions,
              "txn_partitions": layout.txn_partitions}
    try:
        await store.create(PARTITIONS_PATH, json.dumps(counts, sort_keys=True).encode(),
                           make_parents=True)
    except NodeExistsError:
        pass
    return await pinned_layout(store, layout)


async def pinned_layout(store: MetadataStore, wanted: ClusterLayout) -> ClusterLayout:
    """`wanted` (the layout a new `--workers N` node would be cut into) with the coordinator
    partition counts a one-process run of this directory pinned, if it did."""
    try:
        data, _ = await store.get(PARTITIONS_PATH)
    except NoNodeError:
        return wanted
    counts = json.loads(data)
    return replace(wanted, group_partitions=int(counts["group_partitions"]),
                   txn_partitions=int(counts["txn_partitions"]))


class PartitionedOffsetStore:
    """OffsetStoreApi over the P coordinator-partition ledgers (see the module docstring)."""

    def __init__(self, factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                 partitions: int, *, snapshot_every: int = 10_000) -> None:
        self.partitions = [LedgerOffsetStore(factory, config, ledger_name=group_ledger_name(i),
                                             snapshot_every=snapshot_every)
                           for i in range(partitions)]

    def _of(self, group_id: str) -> LedgerOffsetStore:
        return self.partitions[coordinator_partition(group_id, len(self.partitions))]

    async def load(self) -> dict[str, dict[OffsetKey, CommittedOffset]]:
        states: list[dict[str, dict[OffsetKey, CommittedOffset]]] = [{}] * len(self.partitions)

        async def one(i: int) -> None:
            states[i] = await self.partitions[i].load()

        async with trio.open_nursery() as nursery:  # side by side: each its own ledger
            for i in range(len(self.partitions)):
                nursery.start_soon(one, i)
        return {group: offsets for state in states for group, offsets in state.items()}

    async def load_groups(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = {}
        for store in self.partitions:
            groups.update(await store.load_groups())
        return groups

    async def commit(self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        await self._of(group_id).commit(group_id, offsets)

    async def store_group(self, group_id: str, record: dict[str, Any] | None) -> None:
        await self._of(group_id).store_group(group_id, record)

    async def delete(self, group_id: str, keys: list[OffsetKey] | None) -> None:
        await self._of(group_id).delete(group_id, keys)

    async def close(self) -> None:
        for store in self.partitions:
            await store.close()
