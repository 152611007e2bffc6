"""A data directory moved between `--workers 1` and `--workers 2` keeps its coordinator state.

Kafka fixes the number of `__consumer_offsets` (and `__transaction_state`) partitions for the
life of a cluster, whatever its broker count; ledgerwire keeps them per coordinator partition
in every shape (gateway/coordinator/partitioned_offsets.py, gateway/kafka/local_transactions.py).
One standalone's data directory runs with 1 worker, then 2, then 1 again (SIGTERM between), with
real confluent-kafka clients:

- committed offsets (plain commits and a transaction's) are where the group left them after
  each change, and a subscribed consumer resumes there (before: lost, so the group restarted
  from auto.offset.reset: re-delivered or skipped records);
- a transaction left open at the change is aborted when its producer's successor calls
  init_transactions (the coordinator remembers it), so read_committed consumers get past it
  and see every committed transaction and nothing of the aborted ones (before: its state was
  lost, nobody ever aborted it, and the partition's last stable offset stayed stuck below it).

And a data directory whose offsets a one-process standalone kept in the single ledger (before
session 15) has them moved into the partition ledgers at its next start, with 1 worker (the
standalone moves them) or 2 (the supervisor does, before its workers start).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.standalone import REPO, Standalone, free_port_range

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4
RECORDS = 60  # per partition
GROUP = "moved-group"
TXN_GROUP = "moved-txn-group"
TXN_ID = "moved-txn"
# answers while a group's coordinator partition moves or loads: a client asks again
COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                      KafkaError.COORDINATOR_NOT_AVAILABLE}


class Node(Standalone):
    """One data directory, started with 1 or 2 workers on the same ports."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, bookies=2)  # the 2-worker shape's bookies, in every run
        self.kafka_port = free_port_range(2)
        self.workers = 1

    def start_with(self, workers: int) -> None:
        self.workers = workers
        self.extra_args = ["--workers", str(workers), "--no-rocketmq"]
        self.start(timeout_s=180.0)

    def _accepts(self) -> bool:
        return False  # wait for the ready line (a 2-worker node's worker 0 listens first)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    server = Node(tmp_path / "data")
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop(timeout_s=90)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, asked again on a retriable error (as the Java consumer's
    committed() does by itself): right after a start, a group's coordinator partition may still
    be on its way to the worker it settles on (NOT_COORDINATOR), which librdkafka's committed()
    raises at once instead of asking the new coordinator."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                found = consumer.committed(
                    [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=60)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if not (error.retriable() or error.code() in COORDINATOR_MOVING) \
                        or time.monotonic() > deadline:  # fmt: skip
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def first_offsets_consumed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Subscribe as `group` and note the first offset each partition delivers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    first: dict[int, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            first.setdefault(msg.partition(), msg.offset())
    finally:
        consumer.close()
    return first


def read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    """Every value a read_committed consumer gets from the start, once `expected` arrived and
    nothing more came for a few seconds (or after 90 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    values: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        quiet_until = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value().decode())
                continue
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 3
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return values


def transaction(bootstrap: str, topic: str, tag: str, *, commit_it: bool,
                offsets: dict[int, int] | None = None) -> Producer:
    """A transactional producer (TXN_ID) that writes `tag`-0..9 to partition 0, adds
    `offsets` of TXN_GROUP, and commits, or (commit_it False) leaves it open, flushed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"{tag}-{i}".encode(), partition=0)
    producer.flush(60)
    if offsets:
        meta = Consumer({"bootstrap.servers": bootstrap, "group.id": TXN_GROUP})
        try:
            producer.send_offsets_to_transaction(
                [TopicPartition("numbers", p, o) for p, o in offsets.items()],
                meta.consumer_group_metadata(), 60)
        finally:
            meta.close()
    if commit_it:
        producer.commit_transaction(60)
    return producer


def test_offsets_and_transactions_survive_worker_count_changes(node: Node) -> None:
    node.start_with(1)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for f in admin.create_topics([NewTopic("numbers", PARTITIONS, 1),
                                  NewTopic("txns", 1, 1)]).values():
        f.result(60)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce("numbers", f"{p}-{i}".encode(), partition=p)
    assert producer.flush(60) == 0

    # (workers to move to, plain commits, a transaction's commits) before each move
    moves = [(2, {p: 5 + 7 * p for p in range(PARTITIONS)}, {p: 3 + p for p in range(PARTITIONS)}),
             (1, {p: 11 + 9 * p for p in range(PARTITIONS)},
              {p: 4 + 2 * p for p in range(PARTITIONS)})]
    committed_txns: list[str] = []
    for step, (to_workers, plain, in_txn) in enumerate(moves):
        commit(node.bootstrap, GROUP, "numbers", plain)
        transaction(node.bootstrap, "txns", f"committed{step}", commit_it=True, offsets=in_txn)
        committed_txns.append(f"committed{step}")
        open_one = transaction(node.bootstrap, "txns", f"open{step}", commit_it=False)
        assert committed(node.bootstrap, GROUP, "numbers") == plain
        assert committed(node.bootstrap, TXN_GROUP, "numbers") == in_txn

        node.stop(timeout_s=90)
        del open_one  # the process that held it is gone: its successor fences it
        node.start_with(to_workers)

        assert committed(node.bootstrap, GROUP, "numbers") == plain, (
            f"offsets lost moving to {to_workers} worker(s)")
        assert committed(node.bootstrap, TXN_GROUP, "numbers") == in_txn
        assert first_offsets_consumed(node.bootstrap, GROUP, "numbers") == plain
        # the successor's init_transactions aborts the open transaction; its next one commits
        transaction(node.bootstrap, "txns", f"after{step}", commit_it=True)
        committed_txns.append(f"after{step}")
        expected = [f"{tag}-{i}" for tag in committed_txns for i in range(10)]
        try:
            seen = read_committed(node.bootstrap, "txns", len(expected))
        except KafkaException as exc:  # pragma: no cover - a failure's detail
            raise AssertionError(f"read_committed failed: {exc}\n{node.log()}") from exc
        assert seen == expected, f"after moving to {to_workers} worker(s): {seen}"


def write_single_ledger_offsets(node: Node, offsets: dict[int, int]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.legacy_layout_driver", str(node.data_dir),
         str(node.bookie_port), str(node.bookies), GROUP, "numbers",
         *(f"{p}={o}" for p, o in offsets.items())],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("workers", [1, 2])
def test_single_ledger_offsets_are_moved_at_the_next_start(node: Node, workers: int) -> None:
    node.start_with(1)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic("numbers", PARTITIONS, 1)])["numbers"].result(60)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce("numbers", f"{p}-{i}".encode(), partition=p)
    assert producer.flush(60) == 0
    node.stop(timeout_s=90)
    old = {p: 13 + 5 * p for p in range(PARTITIONS)}
    write_single_ledger_offsets(node, old)

    node.start_with(workers)
    assert committed(node.bootstrap, GROUP, "numbers") == old
    assert first_offsets_consumed(node.bootstrap, GROUP, "numbers") == old
    assert "moved __system/offsets/__consumer_offsets into 8 partition ledgers" in node.log()
    node.stop(timeout_s=90)
    node.start_with(3 - workers)  # and on to the other shape: moved once, kept
    assert committed(node.bootstrap, GROUP, "numbers") == old
