"""Transactions with real clients against a real `ledgerwire standalone` subprocess.

confluent-kafka commit and abort; read_committed consumers see exactly the committed messages
and read_uncommitted ones see everything but the control records; a consume-transform-produce
application is exactly-once across a SIGKILL mid-transaction; the coordinator and the aborted
index survive a broker crash; kafka-python's and aiokafka's transactional producers (and
kafka-python's read_committed consumer) work too.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_python import poll_records
from tests.support.standalone import REPO, Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)])
    futures[topic].result(30)


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = 1,
                idle_s: float = 2.0) -> list[bytes]:
    """Every value of `topic` (all partitions, in partition then offset order)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {}
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        m = consumer.poll(0.2)
        if m is None:
            continue
        assert not m.error(), m.error()
        got.setdefault(m.partition() or 0, []).append((m.offset() or 0, m.value() or b""))
        last = time.monotonic()
    consumer.close()
    return [v for p in sorted(got) for _o, v in sorted(got[p])]


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 2})
    producer.init_transactions(30)
    return producer


def test_commit_and_abort_with_both_isolation_levels(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "txn-basic", 2)
    producer = transactional_producer(bootstrap, "basic-1")
    expected: list[bytes] = []
    for n in range(6):
        producer.begin_transaction()
        values = [f"t{n}-{i}".encode() for i in range(10)]
        for i, v in enumerate(values):
            producer.produce("txn-basic", value=v, partition=i % 2)
        if n % 2 == 0:
            producer.commit_transaction(30)
            expected += values
        else:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)
    committed = read_values(bootstrap, "txn-basic", "read_committed", 2)
    assert Counter(committed) == Counter(expected)
    everything = read_values(bootstrap, "txn-basic", "read_uncommitted", 2)
    assert len(everything) == 60  # both kinds, and no control record surfaced as a message
    assert set(everything) >= set(expected)


def test_read_committed_consumer_waits_for_the_commit(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "txn-wait")
    producer = transactional_producer(bootstrap, "wait-1")
    producer.begin_transaction()
    producer.produce("txn-wait", value=b"pending")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wait-reader",
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition("txn-wait", 0, 0)])
    assert consumer.poll(1.5) is None  # held back by the open transaction
    low, high = consumer.get_watermark_offsets(TopicPartition("txn-wait", 0), 10)
    assert high == 0  # the LSO: read_committed ListOffsets latest
    producer.commit_transaction(30)
    started = time.monotonic()
    message = consumer.poll(10)
    assert message is not None and message.value() == b"pending"
    assert time.monotonic() - started < 3.0
    consumer.close()


def test_invalid_use_is_refused_with_kafka_errors(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "txn-fence")
    zombie = transactional_producer(bootstrap, "fenced-1")
    zombie.begin_transaction()
    zombie.produce("txn-fence", value=b"zombie")
    zombie.flush(30)
    successor = transactional_producer(bootstrap, "fenced-1")  # fences the zombie
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(10)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    successor.begin_transaction()
    successor.produce("txn-fence", value=b"successor")
    successor.commit_transaction(30)
    assert read_values(bootstrap, "txn-fence", "read_committed") == [b"successor"]


def run_app(bootstrap: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.transactions.eos_app", bootstrap, *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )


def test_consume_transform_produce_is_exactly_once_across_a_producer_crash(
    module_standalone: Standalone,
) -> None:
    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "eos-in", 2)
    create_topic(bootstrap, "eos-out", 2)
    source = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"msg-{i:04d}".encode() for i in range(300)]
    for i, v in enumerate(values):
        source.produce("eos-in", value=v, partition=i % 2)
    assert source.flush(30) == 0
    args = ("eos-in", "eos-out", "eos-group", "eos-app-1")
    first = run_app(bootstrap, *args, "3")
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.strip() == "IN_TXN", line
    finally:
        first.kill()  # SIGKILL with the fourth transaction open and its records in the log
        first.wait()
        if first.stdout is not None:
            first.stdout.close()
    second = run_app(bootstrap, *args)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and out.startswith("DONE"), out
    committed = read_values(bootstrap, "eos-out", "read_committed", 2)
    assert Counter(committed) == Counter(v.upper() for v in values)  # each exactly once
    # The zombie's flushed records are in the log: read_uncommitted sees them twice.
    assert len(read_values(bootstrap, "eos-out", "read_uncommitted", 2)) > len(values)


def test_coordinator_and_aborted_index_survive_a_broker_crash(standalone: Standalone) -> None:
    bootstrap = standalone.bootstrap
    create_topic(bootstrap, "crash")
    producer = transactional_producer(bootstrap, "crash-1")
    producer.begin_transaction()
    producer.produce("crash", value=b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("crash", value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("crash", value=b"open")
    producer.flush(30)
    standalone.kill()  # SIGKILL with a transaction open
    standalone.start()
    # The restarted coordinator knows the id: a new producer fences and aborts the open one.
    successor = transactional_producer(bootstrap, "crash-1")
    successor.begin_transaction()
    successor.produce("crash", value=b"after")
    successor.commit_transaction(30)
    assert read_values(bootstrap, "crash", "read_committed") == [b"committed", b"after"]
    assert read_values(bootstrap, "crash", "read_uncommitted") == [
        b"committed", b"aborted", b"open", b"after"]


def test_kafka_python_transactional_producer_and_consumer(
    module_standalone: Standalone,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "txn-kp")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-1")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("txn-kp", b"kp-committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("txn-kp", b"kp-aborted")
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert read_values(bootstrap, "txn-kp", "read_committed") == [b"kp-committed"]
    for isolation, expected in (("read_committed", [b"kp-committed"]),
                                ("read_uncommitted", [b"kp-committed", b"kp-aborted"])):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                 enable_auto_commit=False)
        consumer.assign([KpTopicPartition("txn-kp", 0)])
        consumer.seek_to_beginning()
        assert [m.value for m in poll_records(consumer, len(expected))] == expected
        consumer.close()


async def _aiokafka_transactions(bootstrap: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-1")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait("txn-aio", b"aio-committed")
        await producer.begin_transaction()
        await producer.send_and_wait("txn-aio", b"aio-aborted")
        await producer.abort_transaction()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition("txn-aio", 0)])
        batches = await consumer.getmany(timeout_ms=3000)
        return [m.value for records in batches.values() for m in records if m.value]
    finally:
        await consumer.stop()


def test_aiokafka_transactional_producer(module_standalone: Standalone) -> None:
    import asyncio

    create_topic(module_standalone.bootstrap, "txn-aio")
    assert asyncio.run(_aiokafka_transactions(module_standalone.bootstrap)) == [
        b"aio-committed"]
