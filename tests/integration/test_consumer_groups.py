"""Consumer groups with librdkafka and kafka-python: subscribe, rebalance, commit, restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def group_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def test_subscribe_commit_and_offsets_survive_restart(tmp_path: Path) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        produce(server.bootstrap, "grp", 4, 1000)
        consumer = group_consumer(server.bootstrap, "g1")
        consumer.subscribe(["grp"])
        values = set()
        deadline = time.monotonic() + 60
        while len(values) < 1000 and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                values.add(int(msg.value()))
        assert values == set(range(1000))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("grp", p) for p in range(4)], timeout=10)
        assert sorted(tp.offset for tp in committed) == [250, 250, 250, 250]
        consumer.close()

        server.restart()

        again = group_consumer(server.bootstrap, "g1")
        committed = again.committed([TopicPartition("grp", p) for p in range(4)], timeout=10)
        assert sorted(tp.offset for tp in committed) == [250, 250, 250, 250]
        again.close()
    finally:
        server.stop()


def test_two_members_split_the_partitions(standalone: Standalone) -> None:
    produce(standalone.bootstrap, "split", 4, 400)
    first = group_consumer(standalone.bootstrap, "g2")
    second = group_consumer(standalone.bootstrap, "g2")
    first.subscribe(["split"])
    second.subscribe(["split"])
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for index, consumer in enumerate((first, second)):
            for msg in consumer.consume(200, timeout=0.2):
                if msg.error() is None:
                    seen[index].add(int(msg.value()))
        if (
            len(first.assignment()) == 2
            and len(second.assignment()) == 2
            and (len(seen[0] | seen[1]) == 400)
        ):
            break
    assert len(first.assignment()) == 2 and len(second.assignment()) == 2
    parts = {tp.partition for tp in first.assignment()} | {
        tp.partition for tp in second.assignment()
    }
    assert parts == {0, 1, 2, 3}
    assert seen[0] | seen[1] == set(range(400))
    first.close()
    second.close()


def test_kafka_python_group_consumer(standalone: Standalone) -> None:
    produce(standalone.bootstrap, "kp-group", 2, 300)
    consumer = KafkaConsumer(
        "kp-group",
        bootstrap_servers=standalone.bootstrap,
        group_id="kp-g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    values = set()
    deadline = time.monotonic() + 60
    while len(values) < 300 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.update(int(r.value) for r in records)
    assert values == set(range(300))
    consumer.commit()
    committed = {p: consumer.committed(tp) for p, tp in enumerate(consumer.assignment())}
    assert sorted(committed.values()) == [150, 150]
    consumer.close()
