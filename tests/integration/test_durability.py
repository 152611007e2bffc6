"""Acknowledged messages survive SIGKILL; idempotent producers see no duplicates on restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
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
