"""Acknowledged messages survive SIGKILL; idempotent producers see no duplicates on restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def read_values(bootstrap: str, topic: str, expected_at_least: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    got: list[tuple[int, bytes]] = []
    idle = 0
    while len(got) < max(high, expected_at_least) and idle < 20:
        batch = consumer.consume(num_messages=5000, timeout=0.5)
        idle = 0 if batch else idle + 1
        for msg in batch:
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    consumer.close()
    return got


def test_sigkill_after_acks_loses_nothing(tmp_path: Path) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    acked: dict[int, bytes] = {}
    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 5000,
            "retries": 0,
        }
    )

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    deadline = time.monotonic() + 3.0
    i = 0
    while time.monotonic() < deadline:
        try:
            producer.produce("durable", value=b"value-%08d" % i, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        producer.poll(0)
    # Kill while produce requests are still in flight: acks seen so far must all survive.
    producer.poll(0.05)
    snapshot = dict(acked)
    server.kill()
    producer.flush(8)
    assert len(snapshot) > 100, "the test produced too little to mean anything"

    server.start()
    try:
        stored = dict(read_values(server.bootstrap, "durable", len(snapshot)))
        missing = [o for o, v in snapshot.items() if stored.get(o) != v]
        assert missing == [], f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        assert sorted(stored) == list(range(len(stored))), "offsets must stay dense"
    finally:
        server.stop()


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_idempotent_producer_across_restart(tmp_path: Path, client: str) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    topic = "idem"
    total = 6000
    errors: list[object] = []

    def produce() -> None:
        if client == "kafka-python":
            kp = KafkaProducer(
                bootstrap_servers=server.bootstrap,
                acks="all",
                enable_idempotence=True,
                linger_ms=2,
                retry_backoff_ms=200,
                request_timeout_ms=5000,
            )
            futures = []
            for i in range(total):
                futures.append(kp.send(topic, value=b"m-%06d" % i))
                if i % 500 == 0:
                    time.sleep(0.05)
            kp.flush(120)
            for f in futures:
                if f.exception is not None:
                    errors.append(f.exception)
            kp.close()
        else:
            cp = Producer(
                {
                    "bootstrap.servers": server.bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    "message.timeout.ms": 120000,
                }
            )

            def on_delivery(err: object, msg: object) -> None:
                if err is not None:
                    errors.append(err)

            for i in range(total):
                while True:
                    try:
                        cp.produce(topic, value=b"m-%06d" % i, on_delivery=on_delivery)
                        break
                    except BufferError:
                        cp.poll(0.05)
                if i % 500 == 0:
                    cp.poll(0.05)
            cp.flush(120)

    worker = threading.Thread(target=produce)
    worker.start()
    time.sleep(1.0)
    server.restart()
    worker.join(180)
    assert not worker.is_alive()
    assert errors == []
    try:
        values = [v for _, v in read_values(server.bootstrap, topic, total)]
        assert len(values) == total, f"got {len(values)} messages for {total} sent"
        assert values == [b"m-%06d" % i for i in range(total)], "duplicates, gaps or reordering"
    finally:
        server.stop()


def test_sigkill_while_new_partitions_open_loses_nothing(tmp_path: Path) -> None:
    """First writes to new partitions (each opened in one metadata write) killed mid-way:
    every acknowledged one is there after the restart, and every partition takes writes."""
    partitions = 48
    server = Standalone(tmp_path / "data")
    server.start()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("fresh", partitions, 1)])["fresh"].result(60)
    acked: dict[int, bytes] = {}

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.partition()] = msg.value()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                         "linger.ms": 0, "retries": 0, "message.timeout.ms": 5000})
    for p in range(partitions):
        producer.produce("fresh", value=b"first-%d" % p, partition=p, on_delivery=on_delivery)
        producer.poll(0)
    deadline = time.monotonic() + 60
    while not acked and time.monotonic() < deadline:  # some opens done, others in flight
        producer.poll(0.001)
    snapshot = dict(acked)
    server.kill()
    producer.flush(8)
    assert snapshot, "no first write was acknowledged"

    server.start()
    try:
        writer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
        errors: list[object] = []
        for p in range(partitions):  # every partition reopens (recovery) and takes a write
            writer.produce("fresh", value=b"second-%d" % p, partition=p,
                           on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert writer.flush(60) == 0 and errors == []
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "verify-fresh",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("fresh", p, 0) for p in range(partitions)])
        stored: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, stored.values())) < partitions + len(snapshot) \
                and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                stored.setdefault(msg.partition(), []).append(msg.value())
        consumer.close()
        for p, value in snapshot.items():
            assert stored.get(p, [])[:1] == [value], f"partition {p} lost its acknowledged write"
        for p in range(partitions):
            assert stored.get(p, [])[-1:] == [b"second-%d" % p], f"partition {p}: {stored.get(p)}"
    finally:
        server.stop()
