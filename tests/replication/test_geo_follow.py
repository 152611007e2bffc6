"""Geo-replication between two real standalones: what follows a topic besides its records
(RocketMQ-written messages, added partitions, config changes), pause/resume, and a remote
killed with produce requests in flight.  One pair for the module; the kill comes last."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from tests.replication.geo_pair import (
    TOPIC,
    assert_replicated,
    drained,
    produce,
    read_all,
    start_pair,
    status,
    wait_for,
)
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Pair = tuple[Standalone, Standalone]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    east, west = start_pair(tmp_path_factory.mktemp("geo-follow"))
    try:
        yield east, west
    finally:
        east.stop()
        west.stop()


def _user_view(messages: list) -> list[tuple]:  # type: ignore[type-arg]
    return sorted((m.partition, m.key, m.value, m.user_headers) for m in messages)


def test_rocketmq_written_messages_cross_with_tags_keys_and_properties(pair: Pair) -> None:
    from tests.rocketmq.cpp_client import Consumer, message, producer, send_sync_patiently

    east, west = pair
    topic = "geormq"  # RocketMQ names have no dots: mapped to the replicated namespace
    east.admin("topics", "create", topic, "--partitions", "2", "--namespace", "geo/ns")
    wait_for(lambda: topic in AdminClient({"bootstrap.servers": west.bootstrap}).list_topics(
        timeout=10).topics, "the RocketMQ topic to be created in west")
    sender = producer(f"127.0.0.1:{east.name_server_port}", "PG_GEO")
    try:
        for i in range(12):
            tag = "TagX" if i % 3 else "TagY"
            send_sync_patiently(sender, message(topic, f"rmq-{i}".encode(), tag, f"key-{i}",
                                                {"color": "blue", "n": str(i)}))
    finally:
        sender.shutdown()
    wait_for(lambda: drained(east) and drained(west), "both sides to drain")
    in_east, in_west = read_all(east, topic, 2), read_all(west, topic, 2)
    assert len(in_east) == 12
    assert _user_view(in_west) == _user_view(in_east)  # TAGS, KEYS, UNIQ_KEY, properties
    assert all(m.origin == "east" for m in in_west)
    # a RocketMQ consumer in west filters by tag and sees the keys and properties
    consumer = Consumer(f"127.0.0.1:{west.name_server_port}", "CG_GEO", topic, "TagX",
                        props=("color", "n"))
    try:
        assert consumer.wait_for(lambda got: len(got) >= 8, 60), consumer.received
        got = sorted((r.body, r.tags, r.keys, r.props["color"], r.props["n"])
                     for r in consumer.received)
    finally:
        consumer.shutdown()
    assert got == sorted((f"rmq-{i}".encode(), "TagX", f"key-{i}", "blue", str(i))
                         for i in range(12) if i % 3)


def _configs(server: Standalone, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def _alter(server: Standalone, topic: str, key: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value or "", incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": server.bootstrap})  # alive until the answer
    admin.incremental_alter_configs([resource])[resource].result(30)


def _partitions(server: Standalone, topic: str) -> int:
    meta = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(topic, timeout=10)
    return len(meta.topics[topic].partitions) if topic in meta.topics else 0


def test_added_partitions_and_config_changes_follow_both_ways(pair: Pair) -> None:
    east, west = pair
    topic = "geo.ns.follow"
    east.admin("topics", "create", topic, "--partitions", "1", "--config", "retention.ms=600000")
    wait_for(lambda: _partitions(west, topic) == 1, "the topic in west")
    wait_for(lambda: _configs(west, topic).get("retention.ms") == "600000",
             "west created with east's configs")

    admin = AdminClient({"bootstrap.servers": east.bootstrap})  # alive until the answer
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": east.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"in-the-new-partition", partition=2)
    assert producer.flush(30) == 0
    wait_for(lambda: _partitions(west, topic) == 3, "west to get the added partitions")
    wait_for(lambda: drained(east), "east to drain")
    assert [m.value for m in read_all(west, topic, 3) if m.partition == 2] == [
        b"in-the-new-partition"]

    _alter(east, topic, "retention.ms", "700000")
    _alter(east, topic, "max.message.bytes", "2000000")
    wait_for(lambda: _configs(west, topic) == {"retention.ms": "700000",
                                               "max.message.bytes": "2000000"},
             "east's config changes in west")
    _alter(west, topic, "retention.ms", "800000")  # and back the other way
    _alter(west, topic, "retention.bytes", "123456789")
    wanted = {"retention.ms": "800000", "max.message.bytes": "2000000",
              "retention.bytes": "123456789"}
    wait_for(lambda: _configs(east, topic) == wanted, "west's config changes in east")
    _alter(east, topic, "max.message.bytes", None)  # a removal crosses too
    del wanted["max.message.bytes"]
    wait_for(lambda: _configs(west, topic) == wanted, "east's removal in west")
    assert _configs(east, topic) == wanted  # nothing bounced back


def _rows(server: Standalone) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in status(server) if r["topic"] == TOPIC]


def test_pause_holds_the_backlog_and_resume_sends_it_once(pair: Pair) -> None:
    east, west = pair
    produce(east, "before-pause", 20)
    # the 20 reached west and east settled them (a replicator that has not yet seen them is
    # idle with no backlog too, so draining alone would read its counters too early)
    wait_for(lambda: sum(1 for m in read_all(west) if m.value and m.value.startswith(
        b"before-pause")) == 20 and drained(east), "east to drain")  # fmt: skip
    sent_before = sum(r["sent_total"] for r in _rows(east))
    shown = east.admin("replication", "pause", TOPIC)  # the CLI, as an operator runs it
    try:
        assert shown == {"topic": TOPIC, "paused": True}
        wait_for(lambda: all(r["state"] == "paused" for r in _rows(east)), "the pause")
        produce(east, "while-paused", 60)
        wait_for(lambda: sum(r["backlog_messages"] for r in _rows(east)) == 60,
                 "the paused backlog to show")
        assert sum(r["sent_total"] for r in _rows(east)) == sent_before
        assert not any(m.value and m.value.startswith(b"while-paused") for m in read_all(west))
    finally:  # the module's later tests replicate this topic
        east.admin("replication", "resume", TOPIC)
    wait_for(lambda: drained(east) and drained(west), "the backlog to drain after resume")
    assert_replicated(read_all(east), read_all(west), "east")


def test_remote_killed_with_produce_requests_in_flight(pair: Pair) -> None:
    """kill -9 of west while east's pipelines have batches at it: whatever west had
    acknowledged or not, after its restart every message is there exactly once, in order."""
    east, west = pair
    west.stop()
    produce(east, "backlog", 6000)  # a backlog that takes many batches to send
    sent_before = sum(r["sent_total"] for r in _rows(east))
    west.start()
    wait_for(lambda: sum(r["sent_total"] for r in _rows(east)) > sent_before
             or drained(east), "replication to resume", 120)
    west.kill()
    west.start()
    wait_for(lambda: drained(east) and drained(west), "the backlog to drain after the kill")
    assert_replicated(read_all(east), read_all(west), "east")
