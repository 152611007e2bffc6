"""ProducerStateManager's transaction bookkeeping, as pure state: open transactions, markers,
the first unstable offset and the aborted index (with its early stop), snapshots."""

from __future__ import annotations

from gateway.topics.producer_state import AbortedTxn, ProducerStateManager
from protocols.kafka.record_batch import CONTROL_ABORT, CONTROL_COMMIT, build_batch, parse_header


def append_txn(state: ProducerStateManager, pid: int, offset: int, seq: int, n: int = 1) -> None:
    header = parse_header(build_batch([(None, b"x")] * n, producer_id=pid, producer_epoch=0,
                                      base_sequence=seq, is_transactional=True))
    state.check(header)
    state.update(header, offset, 0)


def test_overlapping_aborted_transactions_and_the_early_stop() -> None:
    state = ProducerStateManager()
    append_txn(state, 1, 0, 0)
    append_txn(state, 2, 5, 0)
    assert state.first_unstable_offset(100) == 0
    state.apply_marker(1, 0, CONTROL_ABORT, 0, 10, 0)
    assert state.first_unstable_offset(11) == 5
    state.apply_marker(2, 0, CONTROL_ABORT, 0, 12, 0)
    assert state.first_unstable_offset(12) == 5  # the marker at 12 is not durable yet
    assert state.first_unstable_offset(13) == 13
    assert state.aborted == [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 12, 13)]
    assert [a.producer_id for a in state.aborted_between(0, 6)] == [1, 2]
    assert [a.producer_id for a in state.aborted_between(0, 5)] == [1]
    assert [a.producer_id for a in state.aborted_between(11, 20)] == [2]
    assert state.aborted_between(13, 20) == []


def test_commit_markers_leave_no_aborted_entry_and_snapshots_keep_everything() -> None:
    state = ProducerStateManager()
    append_txn(state, 1, 0, 0)
    state.apply_marker(1, 0, CONTROL_COMMIT, 3, 1, 0)
    append_txn(state, 1, 2, 1)
    state.apply_marker(1, 0, CONTROL_ABORT, 3, 3, 0)
    append_txn(state, 7, 4, 0, n=2)
    assert state.aborted == [AbortedTxn(1, 2, 3, 4)]
    restored = ProducerStateManager.restore(state.snapshot(6))
    assert restored is not None
    copy, covers = restored
    assert covers == 6
    assert copy.aborted == state.aborted and copy.open_txns == {7: 4}
    assert copy.producers[1].coordinator_epoch == 3
    assert copy.first_unstable_offset(6) == 4
    copy.truncate_before(4)
    assert copy.aborted == [] and 7 in copy.producers


def test_a_format_1_snapshot_still_restores() -> None:
    doc = {"format": 1, "offset": 3, "producers": [[5, 0, 0, [[0, 2, 0, 2, 1000]]]]}
    restored = ProducerStateManager.restore(doc)
    assert restored is not None
    assert restored[0].producers[5].txn_first_offset == -1


def test_describe_producers_rows_show_the_open_transaction_start() -> None:
    from types import SimpleNamespace

    from protocols.kafka.handlers.admin import _producer_rows

    state = ProducerStateManager()
    append_txn(state, 7, 40, 0, n=3)
    rows = _producer_rows(SimpleNamespace(producer_state=state))
    assert [(r["producer_id"], r["last_sequence"], r["current_txn_start_offset"])
            for r in rows] == [(7, 2, 40)]
    state.apply_marker(7, 0, CONTROL_COMMIT, 3, 43, 0)
    row = _producer_rows(SimpleNamespace(producer_state=state))[0]
    assert row["current_txn_start_offset"] == -1 and row["coordinator_epoch"] == 3
