"""`ledgerwire standalone --workers 2` serves every Kafka client unchanged, not only librdkafka.

One node of two workers for the module; each test uses a topic of 8 partitions, led by both
workers (checked), so every produce, fetch, group and transaction below crosses workers:
- kafka-python 3 (idempotent by default) produces and a kafka-python group consumes and commits;
  the committed offsets are read back by another client;
- kafkajs produces (keyed, its own partitioner) and a kafkajs consumer group reads it all;
- confluent-kafka transactions span partitions of both workers: committed ones are read
  exactly once by a read_committed consumer and aborted ones never, and a consume-transform-
  produce loop commits its group's offsets inside its transactions.
test_standalone_workers.py covers confluent-kafka's produce and group consume, the kills and the
admin listener; test_standalone_workers_rocketmq.py the RocketMQ C++ client."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonPartition

from tests.cluster.kafka_workload import create_topic, read_committed
from tests.integration.test_standalone_workers import WORKERS, WorkersStandalone, serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 8
NODE_DIR = Path(__file__).resolve().parents[1] / "node"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersStandalone]:
    with serving(WorkersStandalone(tmp_path_factory.mktemp("workers") / "data")) as server:
        yield server


def spread_topic(node: WorkersStandalone, topic: str) -> None:
    """Create `topic` and wait until its partitions have leaders on both workers."""
    create_topic(node.bootstrap, topic, PARTITIONS, timeout_s=60)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    deadline = time.monotonic() + 90
    leaders: set[int] = set()
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=30)
        leaders = {p.leader for p in metadata.topics[topic].partitions.values()}
        if leaders <= set(metadata.brokers) and len(leaders) == WORKERS:
            return
        time.sleep(0.3)
    raise AssertionError(f"{topic}'s partitions are not led by both workers: {leaders}")


def committed_values(node: WorkersStandalone, topic: str, expected: int) -> list[str]:
    """Every read_committed value of `topic`, once `expected` arrived and every partition
    reported its end (so a duplicate or a late aborted record would be seen too)."""
    return read_committed({"bootstrap.servers": node.bootstrap}, topic, expected, PARTITIONS,
                          timeout_s=90)


def test_kafka_python_produces_and_its_group_consumes_and_commits(
        node: WorkersStandalone) -> None:
    topic, count = "kp-spread", 2000
    spread_topic(node, topic)
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=b"%d" % i, value=b"kp-%05d" % i) for i in range(count)]
    producer.flush(60)
    partitions = Counter(f.get(timeout=30).partition for f in futures)
    producer.close()
    assert sorted(partitions) == list(range(PARTITIONS)), partitions

    consumer = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, group_id="kp-readers",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    seen: list[bytes] = []
    deadline = time.monotonic() + 120
    while len(seen) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=1000).values():
            seen.extend(r.value for r in records)
    consumer.commit()
    consumer.close()
    assert sorted(seen) == sorted(b"kp-%05d" % i for i in range(count))

    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        committed = admin.list_group_offsets("kp-readers")["kp-readers"]
    finally:
        admin.close()
    assert {tp.partition: meta.offset for tp, meta in committed.items()
            if tp.topic == topic} == {p: partitions[p] for p in range(PARTITIONS)}
    # and a new member of the group starts where the group left off: nothing more to read
    again = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id="kp-readers",
                          enable_auto_commit=False)
    assigned = [KafkaPythonPartition(topic, p) for p in range(PARTITIONS)]
    again.assign(assigned)
    assert {tp.partition: again.position(tp) for tp in assigned} == \
        {p: partitions[p] for p in range(PARTITIONS)}
    again.close()


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_kafkajs_produces_and_its_group_consumes(node: WorkersStandalone,
                                                 tmp_path: Path) -> None:
    assert (NODE_DIR / "node_modules" / "kafkajs").is_dir(), "run scripts/run-tests (npm install)"
    topic, count = "js-spread", 3000
    spread_topic(node, topic)  # produce.js's createTopics finds it there and keeps it

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    input_path = tmp_path / "input.json"
    input_path.write_text(json.dumps([
        {"key": b64(b"key-%d" % i), "value": b64(b"js-%05d" % i), "headers": {},
         "timestamp": 1_700_000_000_000 + i} for i in range(count)]))
    produced = subprocess.run(
        ["node", "produce.js", node.bootstrap, topic, "none", str(input_path)],
        cwd=NODE_DIR, capture_output=True, text=True, timeout=300)
    assert produced.returncode == 0, produced.stderr

    consumed = subprocess.run(
        ["node", "consume.js", node.bootstrap, topic, "js-readers", str(count)],
        cwd=NODE_DIR, capture_output=True, text=True, timeout=300)
    assert consumed.returncode == 0, consumed.stderr
    values = [base64.b64decode(json.loads(line)["value"])
              for line in consumed.stdout.splitlines() if line.strip()]
    assert sorted(values) == sorted(b"js-%05d" % i for i in range(count))


def transactional_producer(node: WorkersStandalone, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                         "linger.ms": 5})
    producer.init_transactions(60)
    return producer


def test_transactions_span_both_workers(node: WorkersStandalone) -> None:
    topic = "txn-spread"
    spread_topic(node, topic)
    committed: list[str] = []
    aborted: list[str] = []
    # several transactional ids: their coordinators (crc32 of the id) fall on either worker
    for n in range(4):
        producer = transactional_producer(node, f"spread-txn-{n}")
        for round_, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            values = [f"t{n}-r{round_}-{i}" for i in range(2 * PARTITIONS)]
            for i, value in enumerate(values):
                producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
            if commit:
                producer.commit_transaction(60)
                committed.extend(values)
            else:
                producer.abort_transaction(60)
                aborted.extend(values)
    seen = committed_values(node, topic, len(committed))
    assert Counter(seen) == Counter(committed)
    assert not set(aborted) & set(seen)


def test_consume_transform_produce_commits_offsets_in_its_transactions(
        node: WorkersStandalone) -> None:
    source, sink, total = "eos-in", "eos-out", 400
    spread_topic(node, source)
    spread_topic(node, sink)
    feeder = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(total):
        feeder.produce(source, value=f"m-{i}".encode(), partition=i % PARTITIONS)
    assert feeder.flush(60) == 0

    group = "eos-loop"
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, p, -2) for p in range(PARTITIONS)])
    producer = transactional_producer(node, "eos-loop-txn")
    done = 0
    deadline = time.monotonic() + 120
    while done < total:
        assert time.monotonic() < deadline, f"stuck at {done} of {total}"
        batch = [m for m in consumer.consume(50, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for message in batch:
            producer.produce(sink, value=b"out-" + (message.value() or b""),
                             partition=message.partition() or 0)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        done += len(batch)
    consumer.close()

    assert Counter(committed_values(node, sink, total)) == Counter(
        f"out-m-{i}" for i in range(total))
    # the group's offsets were committed by the transactions: a new member has nothing to read
    check = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                      "enable.auto.commit": False})
    offsets = check.committed([TopicPartition(source, p) for p in range(PARTITIONS)], timeout=30)
    check.close()
    assert {tp.partition: tp.offset for tp in offsets} == {
        p: total // PARTITIONS for p in range(PARTITIONS)}
