"""TopicService: topics in the metadata store, lazy partition logs, deletion, producer ids."""

from __future__ import annotations

import json

import pytest

from protocols.kafka import record_batch as rb
from protocols.kafka.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/no", "ünï"])
async def test_illegal_topic_names(make_broker, name: str) -> None:
    broker = await make_broker()
    with pytest.raises(InvalidTopicError):
        await broker.topics.create_topic(name, 1)


async def test_create_persists_and_validates(make_broker, store) -> None:
    broker = await make_broker(default_partitions=3)
    await broker.topics.create_topic("a.b_c-1", 2, {"retention.ms": "1000"})
    await broker.topics.create_topic("dflt", -1)
    assert broker.topics.topics()["dflt"].partitions == 3
    with pytest.raises(TopicAlreadyExistsError):
        await broker.topics.create_topic("a.b_c-1", 2)
    with pytest.raises(InvalidPartitionsError):
        await broker.topics.create_topic("zero", 0)
    with pytest.raises(InvalidConfigError):
        await broker.topics.create_topic("badcfg", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError):
        await broker.topics.create_topic("badts", 1, {"message.timestamp.type": "Whenever"})
    data, _ = await store.get("/ledgerwire/topics/a.b_c-1")
    doc = json.loads(data)
    assert doc["format"] == 1 and doc["partitions"] == 2
    assert doc["configs"]["retention.ms"] == "1000"
    other = await make_broker()  # another broker (or a restart) sees the same catalogue
    info = other.topics.topics()["a.b_c-1"]
    assert str(info.topic_id) == doc["topic_id"] and info.partitions == 2
    assert set(other.topics.topics()) == {"a.b_c-1", "dflt"}


async def test_partitions_load_lazily_and_unknown_ones_fail(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("lazy", 2)
    assert not await broker.factory.exists("public/default/lazy-1")
    plog = await broker.topics.partition("lazy", 1)
    assert plog is await broker.topics.partition("lazy", 1)
    assert await broker.factory.exists("public/default/lazy-1")
    with pytest.raises(UnknownTopicOrPartitionError):
        await broker.topics.partition("lazy", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        await broker.topics.partition("nope", 0)
    other = await make_broker()
    await other.topics.create_topic("late", 1)
    assert (await broker.topics.partition("late", 0)).high_watermark == 0  # refreshed on demand


async def test_create_partitions_only_increases(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("grow", 2)
    with pytest.raises(InvalidPartitionsError):
        await broker.topics.create_partitions("grow", 2)
    with pytest.raises(InvalidPartitionsError):
        await broker.topics.create_partitions("grow", 1)
    await broker.topics.create_partitions("grow", 5)
    assert broker.topics.topics()["grow"].partitions == 5
    await broker.topics.partition("grow", 4)
    with pytest.raises(UnknownTopicOrPartitionError):
        await broker.topics.create_partitions("missing", 3)


async def test_delete_topic_removes_ledgers_and_state(make_broker, store, bookkeeper) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("gone", 2)
    for p in range(2):
        plog = await broker.topics.partition("gone", p)
        await plog.append(rb.build_batch([(None, b"x")]))
    assert await bookkeeper.list_ledgers()
    await broker.topics.delete_topic("gone")
    assert "gone" not in broker.topics.topics()
    assert not await broker.factory.exists("public/default/gone-0")
    assert await store.exists("/ledgerwire/topics/gone") is None
    assert await store.exists("/ledgerwire/partition-state/gone") is None
    assert await bookkeeper.list_ledgers() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        await broker.topics.delete_topic("gone")
    await broker.topics.create_topic("gone", 1)  # recreated from scratch
    assert (await broker.topics.partition("gone", 0)).high_watermark == 0


async def test_half_deleted_topic_is_finished_at_load(make_broker, store) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("half", 1)
    await (await broker.topics.partition("half", 0)).append(rb.build_batch([(None, b"x")]))
    await broker.topics.close()
    data, stat = await store.get("/ledgerwire/topics/half")
    doc = json.loads(data)
    doc["deleting"] = True
    await store.set("/ledgerwire/topics/half", json.dumps(doc).encode(), stat.version)
    other = await make_broker()
    assert "half" not in other.topics.topics()
    assert await store.exists("/ledgerwire/topics/half") is None
    assert not await other.factory.exists("public/default/half-0")


async def test_failed_log_is_replaced_on_next_use(make_broker, bookkeeper) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("flaky", 1)
    plog = await broker.topics.partition("flaky", 0)
    await plog.append(rb.build_batch([(None, b"a")]))
    bookkeeper.cluster.fail_appends_with = RuntimeError("bookies on fire")
    with pytest.raises(KafkaStorageError):
        await plog.append(rb.build_batch([(None, b"b")]))
    assert plog.failed
    bookkeeper.cluster.fail_appends_with = None
    fresh = await broker.topics.partition("flaky", 0)
    assert fresh is not plog and fresh.high_watermark == 1
    assert (await fresh.append(rb.build_batch([(None, b"c")]))).base_offset == 1


async def test_producer_ids_are_unique_and_increasing(make_broker) -> None:
    a, b = await make_broker(), await make_broker()
    ids = [await a.topics.allocate_producer_id(), await b.topics.allocate_producer_id(),
           await a.topics.allocate_producer_id()]
    assert ids == sorted(ids) and len(set(ids)) == 3 and ids[0] >= 1


async def test_retention_by_bytes_trims_whole_ledgers_and_moves_log_start(make_broker) -> None:
    broker = await make_broker(max_entries_per_ledger=2)
    await broker.topics.create_topic("ret", 1, {"retention.bytes": "1"})
    plog = await broker.topics.partition("ret", 0)
    for _ in range(7):
        await plog.append(rb.build_batch([(None, b"x" * 100)]))
    assert await broker.topics.apply_retention() >= 2
    assert plog.log_start_offset > 0
    first = plog.log_start_offset
    assert [r.offset for b in await plog.read(first, 1 << 20)
            for r in rb.decode_records(b)][0] == first
    await broker.topics.close()
    again = await (await make_broker(max_entries_per_ledger=2)).topics.partition("ret", 0)
    assert (again.log_start_offset, again.high_watermark) == (first, 7)
