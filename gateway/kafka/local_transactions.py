"""Kafka transactions of a one-process standalone: every transaction partition's coordinator.

As committed offsets (gateway/coordinator/partitioned_offsets.py), transaction state has one
layout for every worker count: a transactional id belongs to partition crc32(id) mod P
("__transaction_state", i; P is the layout's `txn_partitions`), whose state lives in the
managed ledger "__system/transactions/__transaction_state-<i>".  `standalone --workers N`
spreads the partitions over its workers (cluster_transactions.py); `--workers 1` runs one
TransactionCoordinator per partition in its own process (`LocalTransactionCoordinators`) and
routes each call by transactional id, so a data directory moves between 1 and N workers with
its transactions: ongoing ones are aborted by their timeout or the producer's next
InitProducerId, prepared ones completed, producer ids and epochs kept.

Why one coordinator per partition and not one over all the ledgers: each load of a partition
takes a new coordinator epoch from the partition's counter (COORDINATOR_EPOCH_PATH/<i>), as a
cluster broker's load does, and a partition log refuses markers whose coordinator epoch is
below the last it took for the producer.  A producer whose markers a worker wrote at its
partition's epoch e must get the next markers at an epoch above e, whichever shape writes them.

This module must never write a transactional id's state to any ledger but its partition's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import trio

from gateway.cluster.bundle_placement import coordinator_partition
from gateway.coordinator.transaction_store import LedgerTransactionStore, transaction_ledger_name
from gateway.kafka.cluster_transactions import COORDINATOR_EPOCH_PATH
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka.broker_api import TopicServiceApi
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.transaction_coordinator import (
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionMetadata,
)


def partition_logs(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                   partitions: int) -> list[LedgerTransactionStore]:
    """The transaction partitions' state logs (the caller closes them, after the
    coordinators stopped)."""
    return [LedgerTransactionStore(factory, config, ledger_name=transaction_ledger_name(i))
            for i in range(partitions)]


class LocalTransactionCoordinators:
    """The P transaction partitions' coordinators of one process (see the module docstring)."""

    def __init__(self, store: MetadataStore, logs: list[LedgerTransactionStore],
                 topics: TopicServiceApi, groups: Any,
                 config: TransactionCoordinatorConfig | None = None) -> None:
        """`logs`: partition i's state log at index i (`partition_logs`)."""
        self._store = store
        self.partitions = [TransactionCoordinator(log, topics, groups, config) for log in logs]

    def _for(self, transactional_id: str) -> TransactionCoordinator:
        return self.partitions[coordinator_partition(transactional_id, len(self.partitions))]

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Load every partition (side by side, each at a new coordinator epoch), then run their
        background work until cancelled."""
        async def epoch(i: int) -> None:
            self.partitions[i].coordinator_epoch = await self._store.next_id(
                f"{COORDINATOR_EPOCH_PATH}/{i}")

        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as loading:
                for i in range(len(self.partitions)):
                    loading.start_soon(epoch, i)
            async with trio.open_nursery() as loading:
                for coordinator in self.partitions:
                    loading.start_soon(nursery.start, coordinator.run)
            task_status.started()

    # --- the calls the Kafka handlers make, routed by transactional id ----------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_pid: int = -1, expected_epoch: int = -1) -> tuple[int, int]:
        return await self._for(transactional_id).init_producer_id(
            transactional_id, timeout_ms, expected_pid, expected_epoch)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[OffsetKey],
                             verify_only: bool = False) -> dict[OffsetKey, int]:
        return await self._for(transactional_id).add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, verify_only)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> None:
        await self._for(transactional_id).add_offsets(
            transactional_id, producer_id, producer_epoch, group_id)

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> None:
        await self._for(transactional_id).end_transaction(
            transactional_id, producer_id, producer_epoch, commit)

    async def txn_offset_commit(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, group_id: str,
                                offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        await self._for(transactional_id).txn_offset_commit(
            transactional_id, producer_id, producer_epoch, group_id, offsets)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self._for(transactional_id).describe(transactional_id)

    def list_transactions(self) -> list[TransactionMetadata]:
        return [txn for c in self.partitions for txn in c.list_transactions()]

    def pending_offset_partitions(self, group_id: str) -> set[OffsetKey]:
        pending: set[OffsetKey] = set()
        for coordinator in self.partitions:
            pending |= coordinator.pending_offset_partitions(group_id)
        return pending
