"""TransactionCoordinator on real topic services and a ledger-backed store: the transition
table, timeouts, epoch exhaustion, and state that survives a coordinator restart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway.coordinator.transaction_store import LedgerTransactionStore
from protocols.kafka.errors import (
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.record_batch import build_batch
from protocols.kafka.transaction_coordinator import (
    MAX_EPOCH,
    TRANSITIONS,
    IllegalTransitionError,
    TransactionCoordinator,
    TransactionMetadata,
    TxnState,
)


class RecordingGroups:
    """Stands in for the GroupCoordinator: records the offsets transactions apply."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict[OffsetKey, CommittedOffset]]] = []

    async def apply_transactional_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        self.applied.append((group_id, dict(offsets)))


async def coordinator_on(broker: Any, groups: Any = None) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(LedgerTransactionStore(broker.factory), broker.topics,
                                         groups)
    for txn_id, record in (await coordinator._store.load()).items():
        coordinator.transactions[txn_id] = TransactionMetadata.from_record(record)
    coordinator._loaded = True
    return coordinator


def described(coordinator: TransactionCoordinator, txn_id: str) -> TransactionMetadata:
    txn = coordinator.describe(txn_id)
    assert txn is not None
    return txn


def txn_batch(pid: int, epoch: int, seq: int) -> bytes:
    return build_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def test_the_transition_table_is_kafkas() -> None:
    assert TRANSITIONS[TxnState.ONGOING] == {TxnState.ONGOING, TxnState.PREPARE_COMMIT,
                                             TxnState.PREPARE_ABORT}
    assert TRANSITIONS[TxnState.PREPARE_COMMIT] == {TxnState.COMPLETE_COMMIT}
    assert TRANSITIONS[TxnState.DEAD] == frozenset()
    txn = TransactionMetadata("t", 1, 0, 1000)
    for target in TxnState:
        if target in TRANSITIONS[TxnState.EMPTY]:
            assert txn.moved_to(target).state is target
        else:
            with pytest.raises(IllegalTransitionError):
                txn.moved_to(target)


async def test_timed_out_transaction_is_aborted_and_its_producer_fenced(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    coordinator = await coordinator_on(broker)
    pid, epoch = await coordinator.init_producer_id("slow", 1000)
    await coordinator.add_partitions("slow", pid, epoch, [("t", 0)])
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(pid, epoch, 0))
    started = described(coordinator, "slow").txn_start_ms
    await coordinator.check_once(now_ms=started + 500)
    assert described(coordinator, "slow").state is TxnState.ONGOING
    await coordinator.check_once(now_ms=started + 1500)
    txn = described(coordinator, "slow")
    assert txn.state is TxnState.COMPLETE_ABORT and txn.producer_epoch == epoch + 1
    assert plog.last_stable_offset == plog.high_watermark == 2
    assert plog.aborted_transactions(0, 2) == [(pid, 0)]
    with pytest.raises(ProducerFencedError):
        await coordinator.end_transaction("slow", pid, epoch, True)


async def test_idle_transactional_ids_expire(make_broker) -> None:
    broker = await make_broker()
    coordinator = await coordinator_on(broker)
    await coordinator.init_producer_id("old", 1000)
    last = described(coordinator, "old").last_update_ms
    await coordinator.check_once(
        now_ms=last + coordinator.config.transactional_id_expiration_ms + 1)
    assert coordinator.describe("old") is None
    assert "old" not in (await coordinator_on(broker)).transactions


async def test_epoch_exhaustion_moves_to_a_new_producer_id(make_broker) -> None:
    broker = await make_broker()
    coordinator = await coordinator_on(broker)
    pid, _ = await coordinator.init_producer_id("many", 1000)
    txn = described(coordinator, "many")
    coordinator.transactions["many"] = TransactionMetadata(
        "many", pid, MAX_EPOCH, 1000, txn.state, last_update_ms=txn.last_update_ms)
    new_pid, new_epoch = await coordinator.init_producer_id("many", 1000)
    assert new_pid != pid and new_epoch == 0


async def test_state_survives_a_coordinator_restart(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("out", 1)
    first = await coordinator_on(broker)
    pid, epoch = await first.init_producer_id("app", 60000)
    await first.add_partitions("app", pid, epoch, [("out", 0)])
    await first.add_offsets("app", pid, epoch, "grp")
    await first.txn_offset_commit("app", pid, epoch, "grp", {("in", 0): CommittedOffset(42)})
    assert first.pending_offset_partitions("grp") == {("in", 0)}
    plog = await broker.topics.partition("out", 0)
    await plog.append(txn_batch(pid, epoch, 0))
    # Restart: another broker's coordinator loads the ledger (fencing the first one's).
    other = await make_broker()
    groups = RecordingGroups()
    second = await coordinator_on(other, groups)
    txn = described(second, "app")
    assert txn.state is TxnState.ONGOING and txn.partitions == {("out", 0)}
    assert txn.pending_offsets == {"grp": {("in", 0): CommittedOffset(42)}}
    await second.end_transaction("app", pid, epoch, True)
    assert groups.applied == [("grp", {("in", 0): CommittedOffset(42)})]
    assert second.pending_offset_partitions("grp") == set()
    plog2 = await other.topics.partition("out", 0)
    assert plog2.last_stable_offset == plog2.high_watermark == 2


async def test_prepare_commit_found_at_load_is_completed(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("out", 1)
    first = await coordinator_on(broker)
    pid, epoch = await first.init_producer_id("app", 60000)
    await first.add_partitions("app", pid, epoch, [("out", 0)])
    await (await broker.topics.partition("out", 0)).append(txn_batch(pid, epoch, 0))
    # Crash between logging PrepareCommit and writing the markers.
    await first._save(described(first, "app").moved_to(TxnState.PREPARE_COMMIT))
    with pytest.raises(ConcurrentTransactionsError):
        await first.add_partitions("app", pid, epoch, [("out", 0)])
    other = await make_broker()
    second = await coordinator_on(other)
    assert described(second, "app").state is TxnState.PREPARE_COMMIT
    await second.check_once()
    assert described(second, "app").state is TxnState.COMPLETE_COMMIT
    plog = await other.topics.partition("out", 0)
    assert plog.last_stable_offset == plog.high_watermark == 2
    with pytest.raises(InvalidTxnStateError):
        await second.end_transaction("app", pid, epoch, False)


class FlakyGroups(RecordingGroups):
    """A group coordinator that cannot take the offsets the first time (it is moving)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def apply_transactional_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("group coordinator moving")
        await super().apply_transactional_offsets(group_id, offsets)


async def test_end_txn_succeeds_when_offsets_settle_later(make_broker) -> None:
    """Once PrepareCommit is logged the outcome is decided: a failure to hand the offsets to the
    group coordinator is retried in the background, not answered to EndTxn, and the markers
    already written are not written again."""
    broker = await make_broker()
    await broker.topics.create_topic("out", 1)
    groups = FlakyGroups()
    coordinator = await coordinator_on(broker, groups)
    pid, epoch = await coordinator.init_producer_id("app", 60000)
    await coordinator.add_partitions("app", pid, epoch, [("out", 0)])
    await coordinator.add_offsets("app", pid, epoch, "grp")
    await coordinator.txn_offset_commit("app", pid, epoch, "grp", {("in", 0): CommittedOffset(9)})
    plog = await broker.topics.partition("out", 0)
    await plog.append(txn_batch(pid, epoch, 0))
    await coordinator.end_transaction("app", pid, epoch, True)  # no error for the client
    assert described(coordinator, "app").state is TxnState.PREPARE_COMMIT
    assert plog.last_stable_offset == plog.high_watermark == 2  # the marker is written
    await coordinator.check_once()
    assert described(coordinator, "app").state is TxnState.COMPLETE_COMMIT
    assert groups.applied == [("grp", {("in", 0): CommittedOffset(9)})]
    assert plog.high_watermark == 2  # one marker, not two
