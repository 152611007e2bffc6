"""PartitionLog on managed ledgers over MemoryBookKeeper: offsets, reads, restart, concurrency."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from protocols.kafka import record_batch as rb
from protocols.kafka.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
)


def batch(n: int = 2, *, pid: int = -1, epoch: int = -1, seq: int = -1, ts: int = 1_000,
          size: int = 10) -> bytes:
    return rb.build_batch([(None, b"%d" % i + b"x" * size) for i in range(n)],
                          producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          timestamp_ms=ts)


def offsets_of(batches: list[bytes]) -> list[int]:
    return [r.offset for b in batches for r in rb.decode_records(b)]


async def test_dense_offsets_across_rollovers_and_reads_from_any_offset(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=3)
    await broker.topics.create_topic("orders", 1)
    plog = await broker.topics.partition("orders", 0)
    bases = [(await plog.append(batch(3))).base_offset for _ in range(10)]
    assert bases == list(range(0, 30, 3))
    assert plog.high_watermark == plog.last_stable_offset == 30
    assert len([i for i in plog.ledger.ledgers if i.entries]) >= 4  # rolled over
    for use_cache in (True, False):
        if not use_cache:
            plog._cache.clear()
        for offset in range(30):
            out = await plog.read(offset, 1 << 20)
            got = offsets_of(out)
            assert got[0] == offset - offset % 3  # the whole batch holding `offset`
            assert got[-1] == 29
    assert await plog.read(30, 100) == []
    with pytest.raises(OffsetOutOfRangeError):
        await plog.read(31, 100)


async def test_read_respects_max_bytes_but_returns_the_first_batch(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    for _ in range(5):
        await plog.append(batch(1, size=1000))
    for clear in (False, True):
        if clear:
            plog._cache.clear()
        assert len(await plog.read(0, 1)) == 1
        two = await plog.read(1, 2 * len(batch(1, size=1000)))
        assert offsets_of(two) == [1, 2]


@pytest.mark.parametrize("clean_close", [True, False])
async def test_restart_keeps_offsets_and_producer_state(make_broker, store, clean_close) -> None:
    # clean close: state comes from the snapshot written at close; crash: no snapshot at all,
    # the new owner fences the old ledger and replays every batch header.
    broker = await make_broker(snapshot_interval_batches=1000, max_entries_per_ledger=4)
    await broker.topics.create_topic("idem", 1)
    plog = await broker.topics.partition("idem", 0)
    for i in range(6):
        result = await plog.append(batch(2, pid=42, epoch=0, seq=2 * i))
        assert result.base_offset == 2 * i
    if clean_close:
        await broker.topics.close()
    data, _ = await store.get("/ledgerwire/partition-state/idem/0")
    assert (b'"producers"' in data) == clean_close

    broker2 = await make_broker(snapshot_interval_batches=1000, max_entries_per_ledger=4)
    plog2 = await broker2.topics.partition("idem", 0)
    assert plog2.high_watermark == 12 and plog2.log_start_offset == 0
    retry = await plog2.append(batch(2, pid=42, epoch=0, seq=10))
    assert retry.base_offset == 10 and plog2.high_watermark == 12
    with pytest.raises(NotEnoughReplicasError):  # ahead: 12..19 may still come
        await plog2.append(batch(1, pid=42, epoch=0, seq=20))
    with pytest.raises(OutOfOrderSequenceError):  # behind and no retry of a stored batch
        await plog2.append(batch(1, pid=42, epoch=0, seq=3))
    assert (await plog2.append(batch(1, pid=42, epoch=0, seq=12))).base_offset == 12
    assert offsets_of(await plog2.read(0, 1 << 20)) == list(range(13))
    await broker2.topics.close()


async def test_snapshot_plus_replay_of_later_batches(make_broker, store) -> None:
    broker = await make_broker(snapshot_interval_batches=3)
    await broker.topics.create_topic("snap", 1)
    plog = await broker.topics.partition("snap", 0)
    for i in range(5):  # snapshot after the 3rd batch (covers offset 3); 2 batches after it
        await plog.append(batch(1, pid=7, epoch=0, seq=i))
    data, _ = await store.get("/ledgerwire/partition-state/snap/0")
    assert b'"offset": 3' in data
    plog2 = await (await make_broker()).topics.partition("snap", 0)  # crash, take over
    assert (await plog2.append(batch(1, pid=7, epoch=0, seq=4))).base_offset == 4  # retry
    assert (await plog2.append(batch(1, pid=7, epoch=0, seq=1))).base_offset == 1
    assert (await plog2.append(batch(1, pid=7, epoch=0, seq=5))).base_offset == 5


async def test_new_owner_fences_the_old_one(make_broker) -> None:
    old = await make_broker()
    await old.topics.create_topic("t", 1)
    old_log = await old.topics.partition("t", 0)
    await old_log.append(batch(2))
    new = await make_broker()  # a second broker takes over without the first closing
    new_log = await new.topics.partition("t", 0)
    assert new_log.high_watermark == 2
    with pytest.raises(NotLeaderOrFollowerError):  # the state node was claimed by the new owner
        await old_log.delete_records_before(1)
    assert new_log.log_start_offset == 0
    assert (await new_log.append(batch(1))).base_offset == 2
    with pytest.raises(NotLeaderOrFollowerError):
        await old_log.append(batch(1))
    assert old_log.failed
    with pytest.raises(NotLeaderOrFollowerError):
        await old_log.read(0, 100)


async def test_concurrent_appends_keep_offsets_dense(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=7)
    await broker.topics.create_topic("busy", 1)
    plog = await broker.topics.partition("busy", 0)
    results: dict[int, int] = {}

    async def produce(pid: int) -> None:
        for seq in range(10):
            res = await plog.append(batch(1, pid=pid, epoch=0, seq=seq, size=pid))
            results[res.base_offset] = pid

    async with trio.open_nursery() as nursery:
        for pid in range(1, 9):
            nursery.start_soon(produce, pid)
    assert sorted(results) == list(range(80))
    plog._cache.clear()
    stored = await plog.read(0, 1 << 30)
    assert offsets_of(stored) == list(range(80))
    for pid in range(1, 9):  # each producer's batches are in its own order
        mine = [b for b in stored if rb.parse_header(b).producer_id == pid]
        assert [rb.parse_header(b).base_sequence for b in mine] == list(range(10))


async def test_a_batch_judged_before_an_earlier_one_waits_for_it(make_broker) -> None:
    # Two pipelined batches of one producer reach the log in the wrong order (the later one
    # first). Judged at once, the later one was OUT_OF_ORDER and the earlier one appended: a
    # client sees its oldest unacknowledged batch refused after everything before it was
    # acknowledged, which librdkafka treats as a fatal sequence desynchronisation.
    broker = await make_broker()
    await broker.topics.create_topic("pipe", 1)
    plog = await broker.topics.partition("pipe", 0)
    await plog.append(batch(2, pid=7, epoch=0, seq=0))
    later: list[int] = []

    async def send_later() -> None:
        later.append((await plog.append(batch(3, pid=7, epoch=0, seq=4))).base_offset)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_later)
        await trio.testing.wait_all_tasks_blocked()
        assert later == []  # waiting for sequences 2 and 3
        assert (await plog.append(batch(2, pid=7, epoch=0, seq=2))).base_offset == 2
    assert later == [4] and plog.high_watermark == 7
    stored = await plog.read(0, 1 << 20)
    assert [rb.parse_header(b).base_sequence for b in stored] == [0, 2, 4]


async def test_a_gap_that_stays_is_refused_retriably_not_out_of_order(
        make_broker, autojump_clock) -> None:  # noqa: ARG001
    # The earlier batches may come again later (refused before they were stored, during a
    # hand-off): OUT_OF_ORDER here made librdkafka bump its epoch and store again what was
    # stored but unacknowledged (test_idempotent_retry_gap.py).
    broker = await make_broker()
    await broker.topics.create_topic("gap", 1)
    plog = await broker.topics.partition("gap", 0)
    await plog.append(batch(2, pid=7, epoch=0, seq=0))
    start = trio.current_time()
    with pytest.raises(NotEnoughReplicasError):
        await plog.append(batch(1, pid=7, epoch=0, seq=5))
    assert plog.high_watermark == 2  # not stored
    assert trio.current_time() - start == pytest.approx(plog.config.sequence_gap_wait_s)
    with pytest.raises(OutOfOrderSequenceError):
        await plog.append(batch(1, pid=7, epoch=0, seq=1))  # behind: refused at once
    assert trio.current_time() - start == pytest.approx(plog.config.sequence_gap_wait_s)

    async def close_soon() -> None:
        await trio.sleep(0.1)
        await plog.close()

    async with trio.open_nursery() as nursery:  # a waiting batch fails with the closing log
        nursery.start_soon(close_soon)
        with pytest.raises(NotLeaderOrFollowerError):
            await plog.append(batch(1, pid=7, epoch=0, seq=5))
    assert plog.high_watermark == 2


async def test_log_append_time_topic(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    plog = await broker.topics.partition("lat", 0)
    result = await plog.append(batch(3, ts=5))
    assert result.log_append_time_ms > 1_000_000
    [stored] = await plog.read(0, 1 << 20)
    header = rb.parse_header(stored)
    assert header.timestamp_type == 1 and header.max_timestamp == result.log_append_time_ms
    rb.validate_batch(header, stored, from_client=False)
    assert {r.timestamp for r in rb.decode_records(stored)} == {result.log_append_time_ms}


async def test_wait_for_data_is_woken_by_append(make_broker, autojump_clock) -> None:  # noqa: ARG001
    broker = await make_broker()
    await broker.topics.create_topic("poll", 1)
    plog = await broker.topics.partition("poll", 0)
    start = trio.current_time()
    await plog.wait_for_data(0, 5.0)
    assert trio.current_time() - start == pytest.approx(5.0)

    async def later() -> None:
        await trio.sleep(1.0)
        await plog.append(batch(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        start = trio.current_time()
        await plog.wait_for_data(0, 30.0)
        assert trio.current_time() - start == pytest.approx(1.0)
    assert plog.high_watermark == 1


async def test_timestamp_lookups(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=2)
    await broker.topics.create_topic("ts", 1)
    plog = await broker.topics.partition("ts", 0)
    assert await plog.offset_for_timestamp(0) is None
    assert await plog.max_timestamp_offset() is None
    records = [rb.Record(0, t, None, b"v", []) for t in (100, 300, 200)]
    await plog.append(rb.build_batch(records))  # offsets 0..2
    await plog.append(rb.build_batch([rb.Record(0, t, None, b"v", []) for t in (50, 400)]))
    await plog.append(rb.build_batch([rb.Record(0, 400, None, b"v", [])]))  # offset 5
    assert await plog.offset_for_timestamp(150) == (1, 300)
    assert await plog.offset_for_timestamp(301) == (4, 400)
    assert await plog.offset_for_timestamp(401) is None
    assert await plog.max_timestamp_offset() == (4, 400)
    await broker.topics.close()
    reopened = await (await make_broker(max_entries_per_ledger=2)).topics.partition("ts", 0)
    assert await reopened.offset_for_timestamp(250) == (1, 300)
    assert await reopened.max_timestamp_offset() == (4, 400)


async def test_delete_records_before_trims_ledgers_and_survives_restart(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=2)
    await broker.topics.create_topic("del", 1)
    plog = await broker.topics.partition("del", 0)
    for _ in range(8):
        await plog.append(batch(2))  # 16 offsets, 4 ledgers
    ledgers_before = [i.ledger_id for i in plog.ledger.ledgers]
    assert await plog.delete_records_before(9) == 9
    assert plog.log_start_offset == 9
    remaining = [i.ledger_id for i in plog.ledger.ledgers]
    assert remaining[0] > ledgers_before[0] and len(remaining) < len(ledgers_before)
    with pytest.raises(OffsetOutOfRangeError):
        await plog.read(8, 100)
    plog._cache.clear()
    assert offsets_of(await plog.read(9, 1 << 20))[:2] == [8, 9]  # whole batch; client skips 8
    with pytest.raises(OffsetOutOfRangeError):
        await plog.delete_records_before(17)
    await broker.topics.close()
    plog2 = await (await make_broker(max_entries_per_ledger=2)).topics.partition("del", 0)
    assert (plog2.log_start_offset, plog2.high_watermark) == (9, 16)
    assert await plog2.delete_records_before(-1) == 16
    assert await plog2.read(16, 100) == []
    assert (await plog2.append(batch(1))).base_offset == 16


async def test_everything_deleted_then_restart_keeps_the_offset(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=1)
    await broker.topics.create_topic("empty", 1)
    plog = await broker.topics.partition("empty", 0)
    for _ in range(3):
        await plog.append(batch(1))
    await plog.delete_records_before(3)
    await broker.topics.close()
    plog2 = await (await make_broker(max_entries_per_ledger=1)).topics.partition("empty", 0)
    assert (plog2.log_start_offset, plog2.high_watermark) == (3, 3)
    assert (await plog2.append(batch(1))).base_offset == 3


async def test_legacy_and_bad_input(make_broker) -> None:
    broker = await make_broker(max_message_bytes=2_000)
    await broker.topics.create_topic("old", 1)
    plog = await broker.topics.partition("old", 0)
    import struct
    import zlib

    body = struct.pack(">bbqii", 1, 0, 777, -1, 3) + b"abc"
    message = struct.pack(">I", zlib.crc32(body)) + body
    legacy = struct.pack(">qi", 0, len(message)) + message
    assert (await plog.append(legacy)).base_offset == 0
    [stored] = await plog.read(0, 1 << 20)
    assert [(r.timestamp, r.value) for r in rb.decode_records(stored)] == [(777, b"abc")]
    with pytest.raises(MessageTooLargeError):
        await plog.append(batch(1, size=5_000))
    with pytest.raises(InvalidRecordError):
        await plog.append(batch(1) + batch(1))  # Kafka: one v2 batch per partition
    assert plog.high_watermark == 1
