"""The partition side of transactions: open transactions, markers, the last stable offset, the
aborted-transactions index, and what survives a restart (snapshot and replay)."""

from __future__ import annotations

import pytest
import trio

from protocols.kafka import record_batch as rb
from protocols.kafka.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
)


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    return rb.build_batch([(None, b"v%d" % i) for i in range(n)], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def plain_batch(n: int = 1) -> bytes:
    return rb.build_batch([(None, b"p%d" % i) for i in range(n)])


async def test_lso_stops_at_the_oldest_open_transaction_and_moves_on_markers(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(plain_batch())  # 0
    await plog.append(txn_batch(10, 0, 0))  # 1-2, producer 10 opens at 1
    await plog.append(txn_batch(11, 0, 0))  # 3-4, producer 11 opens at 3
    await plog.append(plain_batch())  # 5
    assert plog.high_watermark == 6 and plog.last_stable_offset == 1
    assert await plog.write_txn_marker(10, 0, True, 0) == 6  # commit of producer 10
    assert plog.high_watermark == 7 and plog.last_stable_offset == 3
    assert await plog.write_txn_marker(11, 0, False, 0) == 7  # abort of producer 11
    assert plog.last_stable_offset == plog.high_watermark == 8
    assert plog.aborted_transactions(0, 8) == [(11, 3)]
    assert plog.aborted_transactions(5, 8) == [(11, 3)]  # overlaps: marker at 7
    assert plog.aborted_transactions(8, 20) == []
    assert plog.aborted_transactions(0, 3) == []  # ends before the transaction starts
    # The stored marker is a control batch: key version 0 + type, value version 0 + epoch.
    stored = await plog.read(7, 1 << 20)
    header = rb.parse_header(stored[0])
    assert header.is_control and header.is_transactional and header.producer_id == 11
    control = rb.parse_control_record(rb.decode_records(stored[0])[0])
    assert (control.version, control.control_type, control.coordinator_epoch) == (0, 0, 0)


async def test_a_new_transaction_of_the_same_producer_opens_after_the_marker(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(5, 0, 0))  # 0-1
    await plog.write_txn_marker(5, 0, True, 0)  # 2
    await plog.append(txn_batch(5, 0, 2))  # 3-4
    assert plog.last_stable_offset == 3


async def test_client_control_batches_and_mixed_batches_are_refused(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    with pytest.raises(InvalidRecordError):
        await plog.append(rb.build_control_batch(rb.CONTROL_COMMIT, producer_id=1,
                                                 producer_epoch=0))
    await plog.append(txn_batch(3, 0, 0))
    idempotent = rb.build_batch([(None, b"x")], producer_id=3, producer_epoch=0,
                                base_sequence=2)
    with pytest.raises(InvalidTxnStateError):
        await plog.append(idempotent)


async def test_a_fencing_marker_fences_the_zombie_epoch(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(8, 0, 0))
    await plog.write_txn_marker(8, 1, False, 0)  # the coordinator aborted with a bumped epoch
    with pytest.raises(InvalidProducerEpochError):
        await plog.append(txn_batch(8, 0, 2))  # the zombie's next batch
    with pytest.raises(InvalidProducerEpochError):
        await plog.write_txn_marker(8, 0, True, 0)  # a stale marker
    assert (await plog.append(txn_batch(8, 1, 0))).base_offset == 3  # new epoch starts at 0


@pytest.mark.parametrize("snapshot_interval", [1000, 2])
async def test_open_transactions_and_aborted_index_survive_a_restart(
    make_broker, snapshot_interval: int
) -> None:
    broker = await make_broker(snapshot_interval_batches=snapshot_interval)
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(1, 0, 0))  # 0-1
    await plog.write_txn_marker(1, 0, False, 0)  # 2: abort
    await plog.append(txn_batch(2, 0, 0))  # 3-4 open
    await plog.append(txn_batch(1, 0, 2))  # 5-6 open
    await plog.append(plain_batch())  # 7
    before = (plog.last_stable_offset, plog.aborted_transactions(0, 100))
    assert before == (3, [(1, 0)])
    # Crash: a new owner rebuilds from snapshot + replay.
    reopened = await (await make_broker()).topics.partition("t", 0)
    assert (reopened.last_stable_offset, reopened.aborted_transactions(0, 100)) == before
    await reopened.write_txn_marker(2, 0, True, 0)  # 8
    await reopened.write_txn_marker(1, 0, False, 0)  # 9
    assert reopened.last_stable_offset == 10
    assert reopened.aborted_transactions(0, 100) == [(1, 0), (1, 5)]
    await reopened.close()
    again = await (await make_broker()).topics.partition("t", 0)
    assert again.aborted_transactions(3, 100) == [(1, 5)]
    assert again.last_stable_offset == 10


async def test_committed_waiters_wake_when_the_lso_moves(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(4, 0, 0))
    woke_at: list[float] = []

    async def waiter() -> None:
        await plog.wait_for_data(0, 10.0, committed=True)
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.2)
        assert not woke_at  # data is there (hw 2) but not stable
        started = trio.current_time()
        await plog.write_txn_marker(4, 0, True, 0)
    assert woke_at and woke_at[0] - started < 0.1


async def test_delete_records_trims_the_aborted_index(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    await plog.append(txn_batch(1, 0, 0))  # 0-1
    await plog.write_txn_marker(1, 0, False, 0)  # 2
    await plog.append(txn_batch(1, 0, 2))  # 3-4
    await plog.write_txn_marker(1, 0, False, 0)  # 5
    await plog.delete_records_before(3)
    assert plog.aborted_transactions(0, 100) == [(1, 3)]
