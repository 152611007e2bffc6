"""Log compaction of a partition log (gateway/topics/compactor.py) on in-memory ledgers.

Reads go through PartitionLog.read, as Fetch does: after a pass only the latest record per
key is left below the compaction point, with its original offset; a read from a compacted-away
offset answers the next surviving batch; tombstones go after delete.retention.ms; the open
ledger and the unstable tail are never touched; a new owner sees the same log.
"""

from __future__ import annotations

from typing import Any

import pytest

from protocols.kafka import record_batch as rb
from protocols.kafka.errors import InvalidRecordError


async def append(plog: Any, pairs: list[tuple[bytes | None, bytes | None]]) -> int:
    return (await plog.append(rb.build_batch(pairs))).base_offset


async def read_records(plog: Any, start: int | None = None) -> list[rb.Record]:
    offset = plog.log_start_offset if start is None else start
    out: list[rb.Record] = []
    while offset < plog.high_watermark:
        batches = await plog.read(offset, 1 << 20)
        if not batches:
            break
        for batch in batches:
            out.extend(r for r in rb.decode_records(batch) if r.offset >= offset)
            offset = rb.parse_header(batch).last_offset + 1
    return out


async def compacted_topic(make_broker, **configs: str):  # type: ignore[no-untyped-def]
    broker = await make_broker(max_entries_per_ledger=10)
    await broker.topics.create_topic("table", 1, {"cleanup.policy": "compact",
                                                  "min.cleanable.dirty.ratio": "0.01", **configs})
    return broker, await broker.topics.partition("table", 0)


async def test_a_pass_keeps_the_latest_record_per_key_at_its_offset(make_broker) -> None:
    broker, plog = await compacted_topic(make_broker)
    latest: dict[bytes, tuple[int, bytes]] = {}
    for update in range(12):
        for key in range(5):
            k, v = b"k%d" % key, b"v%d-%d" % (key, update)
            latest[k] = (await append(plog, [(k, v)]), v)
    before = await read_records(plog)
    hw = plog.high_watermark
    [result] = await broker.topics.compaction.compact_topic("table")
    assert result["ran"] and result["keys"] == 5
    assert result["bytes_after"] < result["bytes_before"]
    after = await read_records(plog)
    cleaned = result["cleaned_through"]
    # below the compaction point: one record per key, the latest, at its original offset
    below = [r for r in after if r.offset < cleaned]
    assert len({r.key for r in below}) == len(below)
    for r in after:
        if r.key in latest and latest[r.key][0] == r.offset:
            assert r.value == latest[r.key][1]
    assert {r.key: (r.offset, r.value) for r in after} == latest
    assert [r.offset for r in after] == sorted(r.offset for r in after)
    assert [r for r in after if r.offset >= cleaned] == [
        r for r in before if r.offset >= cleaned]
    assert plog.high_watermark == hw
    # a read from an offset that was compacted away answers the next surviving batch
    gone = next(o for o in range(cleaned) if o not in {r.offset for r in after})
    first = rb.parse_header((await plog.read(gone, 1))[0])
    assert first.base_offset > gone
    assert first.base_offset == min(r.offset for r in after if r.offset > gone)
    # a second broker (the next owner) reads the same
    await broker.topics.close()
    broker2 = await make_broker(max_entries_per_ledger=10)
    plog2 = await broker2.topics.partition("table", 0)
    assert plog2.high_watermark == hw
    assert [(r.offset, r.key, r.value) for r in await read_records(plog2)] == [
        (r.offset, r.key, r.value) for r in after]


@pytest.mark.parametrize("retention_ms, kept", [("86400000", True), ("0", False)])
async def test_tombstones_stay_for_delete_retention_then_go(
        make_broker, retention_ms: str, kept: bool) -> None:
    broker, plog = await compacted_topic(make_broker, **{"delete.retention.ms": retention_ms})
    for key in range(10):
        await append(plog, [(b"k%d" % key, b"v")])
    for key in range(0, 10, 2):
        await append(plog, [(b"k%d" % key, None)])  # deletes of the even keys
    for key in range(20):
        await append(plog, [(b"filler%d" % key, b"x")])  # push the deletes out of the open ledger
    await broker.topics.compaction.compact_topic("table")
    records = await read_records(plog)
    tombstones = [r for r in records if r.value is None]
    assert bool(tombstones) is kept
    assert {r.key for r in records if r.value is not None} >= {b"k%d" % k for k in range(1, 10, 2)}
    assert not {r.key for r in records if r.value is not None} & {b"k%d" % k
                                                                  for k in range(0, 10, 2)}


async def test_the_open_ledger_and_young_ledgers_are_not_compacted(make_broker) -> None:
    broker, plog = await compacted_topic(make_broker, **{"min.compaction.lag.ms": "3600000"})
    for update in range(25):
        await append(plog, [(b"k", b"%d" % update)])
    [result] = await broker.topics.compaction.compact_topic("table")
    assert not result["ran"] and result["reason"] == "nothing cleanable"
    assert len(await read_records(plog)) == 25


async def test_keyless_records_are_refused_per_record(make_broker) -> None:
    _, plog = await compacted_topic(make_broker)
    with pytest.raises(InvalidRecordError) as caught:
        await append(plog, [(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")])
    assert [i for i, _ in caught.value.record_errors] == [1, 3]
    assert "without key" in caught.value.record_errors[0][1]
    assert plog.high_watermark == 0  # the batch is refused as a whole


async def test_switching_delete_to_compact_starts_compaction(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=10)
    await broker.topics.create_topic("t", 1, {})
    plog = await broker.topics.partition("t", 0)
    await append(plog, [(None, b"keyless before the switch")])
    for update in range(30):
        await append(plog, [(b"k", b"%d" % update)])
    with pytest.raises(Exception, match="not compacted"):
        await broker.topics.compaction.compact_topic("t")
    await broker.topics.alter_topic_configs("t", lambda c: {
        **c, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    with pytest.raises(InvalidRecordError):
        await append(plog, [(None, b"keyless after")])
    [result] = await broker.topics.compaction.compact_topic("t")
    assert result["ran"]
    values = [r.value for r in await read_records(plog)]
    assert b"keyless before the switch" not in values  # Kafka's cleaner drops keyless records
    assert values[-1] == b"29"


async def test_compact_delete_does_both(make_broker) -> None:
    broker, plog = await compacted_topic(
        make_broker, **{"cleanup.policy": "compact,delete", "retention.bytes": "1"})
    for update in range(30):
        await append(plog, [(b"k%d" % (update % 3), b"%d" % update)])
    assert plog.ledger.config.retention_bytes == 1
    await broker.topics.compaction.compact_topic("table")
    await plog.apply_retention()
    assert len(plog.ledger.ledgers) <= 2
    assert plog.log_start_offset > 0


async def test_a_transaction_below_the_point_loses_aborted_records(make_broker) -> None:
    broker, plog = await compacted_topic(make_broker, **{"delete.retention.ms": "86400000"})
    pid, epoch = 4000, 0
    batch = rb.build_batch([(b"t", b"aborted")], producer_id=pid, producer_epoch=epoch,
                           base_sequence=0, is_transactional=True)
    await plog.append(batch)
    await plog.write_txn_marker(pid, epoch, commit=False, coordinator_epoch=0)
    for update in range(25):
        await append(plog, [(b"k%d" % (update % 2), b"%d" % update)])
    [result] = await broker.topics.compaction.compact_topic("table")
    assert result["aborted_removed"] == 1
    records = await read_records(plog)
    assert b"aborted" not in [r.value for r in records]
    below = [r.key for r in records if r.offset < result["cleaned_through"]]
    assert len(below) == len(set(below))


async def test_rocketmq_messages_compact_by_their_keys(make_broker) -> None:
    from protocols.rocketmq.message_encoding import MessageMeta, from_record, to_record

    broker, plog = await compacted_topic(make_broker)
    for update in range(30):
        record = to_record(b"body-%d" % update, {"KEYS": f"order-{update % 3}",
                                                 "TAGS": "t"}, MessageMeta(), 1000 + update)
        await plog.append(rb.build_batch([record]))
    [result] = await broker.topics.compaction.compact_topic("table")
    records = [r for r in await read_records(plog) if r.offset < result["cleaned_through"]]
    assert sorted(r.key or b"" for r in records) == [b"order-0", b"order-1", b"order-2"]
    body, properties, _ = from_record(records[-1])  # still a whole RocketMQ message
    assert properties["TAGS"] == "t" and body.startswith(b"body-")


async def test_the_dirty_ratio_and_max_compaction_lag_decide_a_background_pass(
        make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=10)
    await broker.topics.create_topic("lazy", 1, {"cleanup.policy": "compact",
                                                 "min.cleanable.dirty.ratio": "1.0"})
    plog = await broker.topics.partition("lazy", 0)
    for update in range(30):
        await append(plog, [(b"k%d" % (update % 20), b"%d" % update)])
    service = broker.topics.compaction
    [first] = await service.run_once()  # never cleaned: all dirty, ratio 1.0
    assert first.ran and first.reason == "min.cleanable.dirty.ratio"
    for update in range(30, 45):
        await append(plog, [(b"k%d" % (update % 20), b"%d" % update)])
    [skipped] = await service.run_once()
    assert not skipped.ran and "below the minimum" in skipped.reason
    await broker.topics.alter_topic_configs("lazy", lambda c: {**c,
                                                               "max.compaction.lag.ms": "0"})
    assert plog.ledger.config.max_ledger_age_s == 0.001  # ledgers roll for the lag bound
    [done] = await service.run_once()
    assert done.ran and done.reason == "max.compaction.lag.ms"
    status = service.status("lazy")[0]
    assert status["passes"] == 2 and status["last"]["keys"] == 20
    assert service.gauges("lazy", 0, plog)["lag"] == plog.high_watermark - done.cleaned_through
