"""Kafka transactions on a real cluster: ZooKeeper, two bookies and two `ledgerwire broker`
processes, driven by confluent-kafka's transactional producer and read_committed consumers.

A 4-partition topic spread over both brokers: commits and aborts coordinated by either broker;
SIGKILL of the coordinator's broker mid-transaction (the successor producer's InitProducerId
makes the new coordinator fence and abort it); and an exactly-once consume-transform-produce
loop whose transaction coordinator is killed mid-transaction, with the group's coordinator on
the other broker (offsets forwarded and applied across brokers).  The in-process twin of these
paths is test_cluster_transactions_units.py.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from gateway.cluster.bundle_placement import GROUP_TOPIC, TXN_TOPIC, target_broker
from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import create_topic, read_committed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TXN_TOPIC_NAME = "payments"
PARTITIONS = 4


def _coordinator_owner(cluster: Cluster, unit_topic: str, key: str) -> int | None:
    partition = zlib.crc32(key.encode()) % 8  # ClusterLayout.{txn,group}_partitions
    return cluster.partition_owner(unit_topic, partition)


def _txn_id_coordinated_by(cluster: Cluster, node_id: int, prefix: str = "txn") -> str:
    for i in range(1000):
        candidate = f"{prefix}-{i}"
        if _coordinator_owner(cluster, TXN_TOPIC, candidate) == node_id:
            return candidate
    raise AssertionError(f"no key coordinated by broker {node_id}")


def _group_coordinated_by(cluster: Cluster, node_id: int) -> str:
    for i in range(1000):
        candidate = f"group-{i}"
        if _coordinator_owner(cluster, GROUP_TOPIC, candidate) == node_id:
            return candidate
    raise AssertionError(f"no group coordinated by broker {node_id}")


def _producer(bootstrap: str, transactional_id: str) -> Any:

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                     "linger.ms": 5})


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    return read_committed({"bootstrap.servers": bootstrap}, topic, expected, PARTITIONS)


def run_transaction(producer: Any, topic: str, prefix: str, count: int, commit: bool,
                    timeout_s: float = 60.0) -> list[str]:
    """One transaction of `count` values spread over the partitions, committed or aborted."""
    producer.begin_transaction()
    values = [f"{prefix}-{i}" for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
    if commit:
        producer.commit_transaction(timeout_s)
    else:
        producer.abort_transaction(timeout_s)
    return values


def _transaction(producer: Any, prefix: str, count: int, commit: bool) -> list[str]:
    return run_transaction(producer, TXN_TOPIC_NAME, prefix, count, commit)


@pytest.fixture
def txn_cluster(tmp_path: Path) -> Any:
    with Cluster(tmp_path / "cluster", bookies=2, brokers=2, quorum=(2, 2, 2)) as cluster:
        # every bundle on its final broker (rendezvous target) before owners are looked up
        targets = {b: target_broker(b, [1, 2]) for b in range(cluster.bundles)}
        deadline = time.monotonic() + 60
        while cluster.bundle_owners() != targets:
            assert time.monotonic() < deadline, cluster.bundle_owners()
            time.sleep(0.3)
        create_topic(cluster.bootstrap, TXN_TOPIC_NAME, PARTITIONS)
        owners = {cluster.partition_owner(TXN_TOPIC_NAME, p) for p in range(PARTITIONS)}
        assert owners == {1, 2}, owners  # the partitions are spread over both brokers
        yield cluster


def test_commit_and_abort_across_brokers(txn_cluster: Cluster) -> None:
    cluster = txn_cluster
    for coordinator in (1, 2):
        producer = _producer(cluster.bootstrap, _txn_id_coordinated_by(cluster, coordinator))
        producer.init_transactions(60)
        committed = _transaction(producer, f"c{coordinator}", 40, commit=True)
        aborted = _transaction(producer, f"a{coordinator}", 40, commit=False)
        committed += _transaction(producer, f"d{coordinator}", 40, commit=True)
        seen = _read_committed(cluster.bootstrap, TXN_TOPIC_NAME, len(committed) * coordinator)
        mine = [v for v in seen if v.split("-")[0][1:] == str(coordinator)]
        assert sorted(mine) == sorted(committed), cluster.logs()
        assert not set(aborted) & set(seen)


def test_sigkill_of_the_coordinator_mid_transaction_aborts_it(txn_cluster: Cluster) -> None:
    cluster = txn_cluster
    victim = 1
    survivor = 2
    txn_id = _txn_id_coordinated_by(cluster, victim)
    zombie = _producer(cluster.bootstrap, txn_id)
    zombie.init_transactions(60)
    zombie.begin_transaction()
    doomed = [f"z-{i}" for i in range(40)]
    for i, value in enumerate(doomed):
        zombie.produce(TXN_TOPIC_NAME, value=value.encode(), partition=i % PARTITIONS)
    assert zombie.flush(30) == 0  # acknowledged by both brokers' partitions, not committed
    cluster.brokers[victim].kill()
    cluster.wait_all_bundles_owned(by={survivor}, timeout_s=60)
    bootstrap = f"127.0.0.1:{cluster.broker_ports[survivor]}"
    # the same transactional id again: the new coordinator fences the zombie and aborts
    successor = _producer(bootstrap, txn_id)
    successor.init_transactions(90)
    kept = _transaction(successor, "ok", 40, commit=True)
    seen = _read_committed(bootstrap, TXN_TOPIC_NAME, len(kept))
    assert sorted(seen) == sorted(kept), cluster.logs()
    with pytest.raises(KafkaException):  # the zombie's epoch is fenced
        zombie.commit_transaction(30)


def _committed_positions(consumer: Any, partitions: list[Any]) -> None:
    """Rewind the consumer to its group's committed offsets (the start when none)."""
    for tp in consumer.committed(partitions, timeout=30):
        offset = tp.offset if tp.offset >= 0 else -2  # OFFSET_BEGINNING
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def test_exactly_once_loop_survives_a_broker_kill(txn_cluster: Cluster) -> None:
    cluster = txn_cluster
    source, total = "eos-in", 400
    create_topic(cluster.bootstrap, source, PARTITIONS)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(total):
        feeder.produce(source, value=f"m-{i}".encode(), partition=i % PARTITIONS)
    assert feeder.flush(30) == 0
    victim, survivor = 1, 2
    # the transaction's coordinator dies; the group's coordinator (on the survivor) gets the
    # offsets forwarded by TxnOffsetCommit and applied by the coordinator of the other broker
    txn_id = _txn_id_coordinated_by(cluster, victim)
    group = _group_coordinated_by(cluster, survivor)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(source, p, -2) for p in range(PARTITIONS)])
    producer = _producer(cluster.bootstrap, txn_id)
    producer.init_transactions(60)
    done, killed = 0, False
    deadline = time.monotonic() + 180
    try:
        while done < total:
            assert time.monotonic() < deadline, f"stuck at {done}: {cluster.logs()}"
            batch = [m for m in consumer.consume(25, 1.0) if m.error() is None]
            if not batch:
                continue
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(TXN_TOPIC_NAME, value=b"out-" + (m.value() or b""),
                                     partition=m.partition())
                if done >= total // 4 and not killed:
                    # applied on broker 2 by broker 1's coordinator (TxnOffsetCommit, pid -1)
                    committed = consumer.committed(partitions, 30)
                    assert sum(max(tp.offset, 0) for tp in committed) == done
                    producer.flush(30)  # mid-transaction: records written, not committed
                    cluster.brokers[victim].kill()
                    killed = True
                producer.send_offsets_to_transaction(consumer.position(partitions),
                                                     consumer.consumer_group_metadata(), 60)
                producer.commit_transaction(60)
                done += len(batch)
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    producer.abort_transaction(60)
                elif not error.retriable():  # fatal: a new producer fences the old one
                    producer = _producer(cluster.bootstrap, txn_id)
                    producer.init_transactions(90)
                _committed_positions(consumer, partitions)
                done = sum(max(tp.offset, 0) for tp in consumer.committed(partitions, 30))
        committed = consumer.committed(partitions, 30)
        assert sum(tp.offset for tp in committed) == total
    finally:
        consumer.close()
    bootstrap = f"127.0.0.1:{cluster.broker_ports[survivor]}"
    seen = _read_committed(bootstrap, TXN_TOPIC_NAME, total)
    assert len(seen) == len(set(seen)), "duplicates under exactly-once"
    assert sorted(seen) == sorted(f"out-m-{i}" for i in range(total))
