"""Moving a data directory's single coordinator ledgers (single_ledger_migration.py) never
moves a group's committed offset or a transactional id's state back: a directory an older
version ran both with `--workers 1` (single ledgers) and with workers (partition ledgers) has
each key's latest write on either side, and the later one is what the move keeps."""

from __future__ import annotations

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import coordinator_partition
from gateway.coordinator.offset_store import LedgerOffsetStore, group_ledger_name
from gateway.coordinator.single_ledger_migration import move_single_ledgers
from gateway.coordinator.transaction_store import LedgerTransactionStore, transaction_ledger_name
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset
from protocols.kafka.transaction_state import TransactionMetadata, TxnState

LAYOUT = ClusterLayout()


def _txn(pid: int, state: TxnState, update_ms: int) -> dict[str, object]:
    return TransactionMetadata("T", pid, 0, 60_000, state,
                               frozenset({("t", 0)}) if state is TxnState.ONGOING else frozenset(),
                               txn_start_ms=update_ms, last_update_ms=update_ms).to_record()


async def test_the_later_commit_and_transaction_state_win_either_way() -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        # the workers' partition ledgers: g's (t, 0) committed later than the single ledger's,
        # T re-initialised later (a new producer id) with a transaction open
        part = LedgerOffsetStore(factory, None, ledger_name=group_ledger_name(
            coordinator_partition("g", LAYOUT.group_partitions)))
        await part.load()
        await part.commit("g", {("t", 0): CommittedOffset(500, -1, "", 2_000),
                                ("t", 1): CommittedOffset(3, -1, "", 500)})
        await part.close()
        txn_name = transaction_ledger_name(coordinator_partition("T", LAYOUT.txn_partitions))
        txn_part = LedgerTransactionStore(factory, None, ledger_name=txn_name)
        await txn_part.load()
        await txn_part.write("T", _txn(2, TxnState.ONGOING, 2_000))
        await txn_part.close()
        # the single ledgers: older for (t, 0) and T, newer for (t, 1)
        single = LedgerOffsetStore(factory, None)
        await single.load()
        await single.commit("g", {("t", 0): CommittedOffset(100, -1, "", 1_000),
                                  ("t", 1): CommittedOffset(40, -1, "", 1_000),
                                  ("t", 2): CommittedOffset(7, -1, "", 1_000)})
        await single.close()
        single_txns = LedgerTransactionStore(factory, None)
        await single_txns.load()
        await single_txns.write("T", _txn(1, TxnState.COMPLETE_COMMIT, 1_000))
        await single_txns.close()

        await move_single_ledgers(factory, None, LAYOUT)
        after = LedgerOffsetStore(factory, None, ledger_name=group_ledger_name(
            coordinator_partition("g", LAYOUT.group_partitions)))
        offsets = (await after.load())["g"]
        await after.close()
        assert {k: o.offset for k, o in offsets.items()} == {
            ("t", 0): 500, ("t", 1): 40, ("t", 2): 7}
        txns = LedgerTransactionStore(factory, None, ledger_name=txn_name)
        kept = TransactionMetadata.from_record((await txns.load())["T"])
        await txns.close()
        assert (kept.producer_id, kept.state, kept.partitions) == (
            2, TxnState.ONGOING, frozenset({("t", 0)})), \
            "the open transaction of T's latest producer must still be there to abort"
