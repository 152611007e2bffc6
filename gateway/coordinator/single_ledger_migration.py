"""Moving a data directory's coordinator state from one ledger into the partition ledgers, once.

Before session 15 a one-process standalone kept every group's committed offsets and metadata
in ONE ledger ("__system/offsets/__consumer_offsets") and all transaction state in another
("__system/transactions/__transaction_state"), while `--workers N` kept them per coordinator
partition ("...-<i>"): a data directory moved between the shapes lost its offsets (consumers
restarted from auto.offset.reset) and its transactions.  Every shape now uses the partition
ledgers (partitioned_offsets.py, gateway/kafka/local_transactions.py); this module moves an
old directory's single ledgers into them, at start, before anything is served:

    for each single ledger that still exists (offsets, then transactions):
      1. load it (all records from its last snapshot);
      2. for each partition i that has entries in it: load ledger i, take the entries of its
         partition over what ledger i holds for them, and append the result as ONE snapshot
         record (durable before the next step);
      3. delete the single ledger (its metadata node in one compare-and-set: the commit point;
         its bookie ledgers after).

Crash safety (kill -9 at each step, tests/gateway/test_single_ledger_migration_crash.py):
nothing is served until the migration returns, so nothing changes the single ledger or the
partition ledgers between a crash and the next start, which runs it again: step 2 takes the
same entries again over a partition that holds them already, and writes the same state (each
partition's whole state in one record, so never half of it); after step 3's node is gone the
ledger is not looked at again.  Entries are taken, never added to: an offset is set, not
advanced, so doing it twice applies nothing twice.  A directory that also has partition
ledgers (an older version run with workers, then without) keeps their entries for groups and
ids the single ledger does not hold, and for those it does the later of the two (commit time,
transaction update time; the single ledger's on a tie).
Left behind by a crash inside step 3: the single ledger's bookie ledgers (as a topic deletion
crashed at that point leaves them).

This module must never delete a single ledger before every partition's record is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import coordinator_partition
from gateway.coordinator.offset_store import (
    KAFKA_OFFSETS_LEDGER,
    LedgerOffsetStore,
    group_ledger_name,
)
from gateway.coordinator.transaction_store import (
    TRANSACTION_STATE_LEDGER,
    LedgerTransactionStore,
    transaction_ledger_name,
)
from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory

log = logging.getLogger("ledgerwire.coordinators.migration")

# kill -9 points (ledger_backend/bookie/crash_points.py): after each partition's record is
# durable (LEDGERWIRE_CRASH_AFTER=k: the k-th), before and after a single ledger's deletion
CRASH_POINTS = ("coordinator_layout.after_partition", "coordinator_layout.before_delete",
                "coordinator_layout.after_delete")


class _PartitionLog(Protocol):
    async def load(self) -> Any: ...

    async def adopt(self, other: Any, keys: Iterable[str]) -> None: ...

    async def close(self) -> None: ...


async def move_single_ledgers(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                              layout: ClusterLayout) -> bool:
    """Move what single ledgers this data directory still has into the layout's partition
    ledgers (see the module docstring); whether there was anything to move."""
    moved = False
    if await factory.exists(KAFKA_OFFSETS_LEDGER):
        old_offsets = LedgerOffsetStore(factory, config, ledger_name=KAFKA_OFFSETS_LEDGER)
        state = await old_offsets.load()
        groups = sorted(set(state) | set(await old_offsets.load_groups()))
        await _move(factory, old_offsets, KAFKA_OFFSETS_LEDGER, groups, layout.group_partitions,
                    lambda i: LedgerOffsetStore(factory, config, ledger_name=group_ledger_name(i)),
                    "groups")
        moved = True
    if await factory.exists(TRANSACTION_STATE_LEDGER):
        old_txns = LedgerTransactionStore(factory, config, ledger_name=TRANSACTION_STATE_LEDGER)
        txn_ids = sorted(await old_txns.load())
        await _move(factory, old_txns, TRANSACTION_STATE_LEDGER, txn_ids, layout.txn_partitions,
                    lambda i: LedgerTransactionStore(factory, config,
                                                     ledger_name=transaction_ledger_name(i)),
                    "transactional_ids")
        moved = True
    return moved


async def _move(factory: ManagedLedgerFactory, old: _PartitionLog, name: str, keys: list[str],
                partitions: int, partition_log: Callable[[int], _PartitionLog], what: str) -> None:
    by_partition: dict[int, list[str]] = {}
    for key in keys:
        by_partition.setdefault(coordinator_partition(key, partitions), []).append(key)
    for i in sorted(by_partition):
        target = partition_log(i)
        await target.load()
        try:
            await target.adopt(old, by_partition[i])
        finally:
            await target.close()
        crash_point("coordinator_layout.after_partition")
    await old.close()
    crash_point("coordinator_layout.before_delete")
    await factory.delete(name)
    crash_point("coordinator_layout.after_delete")
    log.info("moved %s into %d partition ledgers (%s: %d); the single ledger is deleted",
             name, partitions, what, len(keys))
