"""Retention and TTL on offloaded ledgers, through a `ledgerwire standalone`'s retention service.

A topic's older ledgers are offloaded to a directory and their bookie copies deleted. Then

- the topic's `retention.bytes` (set with confluent-kafka's AdminClient) and one retention pass
  (`POST /admin/v1/retention/run`) delete the oldest ledgers *and their objects*; a new group
  starting at the earliest offset starts at the new log start and reads the rest byte-identical;
- a namespace's `message_ttl_seconds` moves a lagging group past the expired messages, whose
  timestamps only the offloaded objects hold, and its `retention_time_minutes = 0` then deletes
  the ledgers every group consumed, objects included; the group resumes at the first live one.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.offload.test_offload_damaged_objects import objects_of
from tests.support.kafka_records import position
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 2400


def produce(bootstrap: str, topic: str, timestamp_of) -> list[tuple[int, bytes]]:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "65536"})])[
        topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent: list[tuple[int, bytes]] = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        sent.append((msg.offset(), msg.value()))

    for i in range(RECORDS):
        producer.produce(topic, value=b"%05d-" % i + bytes(150), timestamp=timestamp_of(i),
                         on_delivery=delivered)
        if i % 200 == 199:
            producer.flush(30)
    assert producer.flush(30) == 0 and len(sent) == RECORDS
    return sorted(sent)


def run_retention(sa: Standalone) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{sa.admin_port}/admin/v1/retention/run", data=b"{}", method="POST",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return dict(json.loads(answer.read()))


def read_from(bootstrap: str, topic: str, group: str, until: int) -> list[tuple[int, bytes]]:
    """What a consumer of `group` (committed offset, else the earliest) reads up to `until`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and (not got or got[-1][0] < until - 1):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((position(msg)[1], msg.value() or b""))
    finally:
        consumer.close()
    return got


def offload(sa: Standalone, topic: str, tier: Path) -> list[Path]:
    rows = sa.admin("topics", "offload", topic)
    assert rows[0]["ledgers_offloaded"] >= 4 and rows[0]["ledgers_on_bookies"] == 1, rows
    objects = objects_of(tier, topic, 0)
    assert len(objects) == rows[0]["ledgers_offloaded"]
    return objects


@pytest.mark.timeout(300)
def test_retention_bytes_deletes_offloaded_ledgers_and_their_objects(server: Standalone,
                                                                     tmp_path: Path) -> None:
    topic = "aged"
    sent = produce(server.bootstrap, topic, lambda i: int(time.time() * 1000))
    objects = offload(server, topic, tmp_path / "tier")
    keep = sum(p.stat().st_size for p in objects[len(objects) // 2:])  # about half the history
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", str(keep),
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)

    run_retention(server)
    left = objects_of(tmp_path / "tier", topic, 0)
    assert 0 < len(left) < len(objects)
    assert left == objects[len(objects) - len(left):], "not the oldest objects were deleted"
    status = server.admin("topics", "offload-status", topic)
    assert status[0]["ledgers_offloaded"] == len(left), status

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "probe"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.close()
    assert 0 < low < RECORDS and high == RECORDS
    assert read_from(server.bootstrap, topic, "newcomer", RECORDS) == sent[low:]
    server.restart()  # the deletion is durable: objects and ledgers stay gone
    assert objects_of(tmp_path / "tier", topic, 0) == left
    assert read_from(server.bootstrap, topic, "after-restart", RECORDS) == sent[low:]


@pytest.mark.timeout(300)
def test_ttl_moves_a_group_past_offloaded_expired_data_and_retention_deletes_it(
        server: Standalone, tmp_path: Path) -> None:
    server.admin("tenants", "create", "t")
    server.admin("namespaces", "create", "t/ttl", "--policy", "message_ttl_seconds=3600",
                 "--policy", "retention_time_minutes=0")
    topic = "t.ttl.events"
    now = int(time.time() * 1000)
    expired = RECORDS // 2  # offsets below this are two hours old, the rest fresh
    sent = produce(server.bootstrap, topic,
                   lambda i: now - 7_200_000 + i if i < expired else now + i)
    objects = offload(server, topic, tmp_path / "tier")

    lagging = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lagging",
                        "enable.auto.commit": False})
    lagging.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    lagging.close()

    first = run_retention(server)
    assert {"group": "lagging", "topic": topic, "partition": 0, "from": 10,
            "to": expired} in first["offsets_expired"], first
    run_retention(server)  # the consumed ledgers go (in the same pass or the next)
    left = objects_of(tmp_path / "tier", topic, 0)
    assert 0 < len(left) < len(objects)
    assert left == objects[len(objects) - len(left):]

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "probe"})
    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.close()
    assert 0 < low <= expired  # whole ledgers only: the one holding `expired` is kept
    assert read_from(server.bootstrap, topic, "lagging", RECORDS) == sent[expired:]
    probe = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lagging"})
    assert probe.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == expired
    probe.close()
