"""Kafka transactions on a secured cluster: ZooKeeper, two bookies and two `ledgerwire broker`
processes whose listener is SASL_PLAINTEXT with ACLs on (authorization "auto").

The brokers log in to each other as the "broker" user ([security] inter_broker_user, password
from a file, SCRAM-SHA-512), which is thereby a super user; the clients log in as "admin" with
PLAIN.  Markers for partitions owned by the other broker (WriteTxnMarkers) and the hand-off of
transactional offsets to a group coordinated by the other broker (TxnOffsetCommit, producer id
-1) go over that login.  Before inter-broker SASL, the peer connection was plaintext without a
login, the listener closed it, and every commit spanning both brokers hung until it timed out.

Last, a third broker joins with a wrong inter-broker password: it logs a clear error at start,
another when a transaction it coordinates sends markers to the other brokers, and keeps running
(no crash loop).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.cluster.bundle_placement import GROUP_TOPIC, TXN_TOPIC, target_broker
from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import read_committed
from tests.cluster.test_cluster_transactions import run_transaction

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
BROKER, BROKER_PASSWORD = "broker", "broker-inter-secret"
TOPIC, PARTITIONS = "secured-payments", 4


def client_config(cluster: Cluster) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD}


def broker_toml(base: Path, password_file: Path) -> str:
    return ('[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\n'
            f'[security]\nsuper_users = ["User:{ADMIN}"]\n'
            f'users_file = "{base / "users.toml"}"\n'
            f'inter_broker_user = "{BROKER}"\n'
            f'inter_broker_password_file = "{password_file}"\n'
            'inter_broker_mechanism = "SCRAM-SHA-512"\n')


def _owner(cluster: Cluster, unit_topic: str, key: str) -> int | None:
    return cluster.partition_owner(unit_topic, zlib.crc32(key.encode()) % 8)


def _key_owned_by(cluster: Cluster, unit_topic: str, node_id: int, prefix: str) -> str:
    for i in range(1000):
        if _owner(cluster, unit_topic, f"{prefix}-{i}") == node_id:
            return f"{prefix}-{i}"
    raise AssertionError(f"no {prefix} key on broker {node_id}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base: Path = tmp_path_factory.mktemp("secured-txn")
    (base / "users.toml").write_text(
        f'[[users]]\nname = "{ADMIN}"\npassword = "{ADMIN_PASSWORD}"\n'
        f'[[users]]\nname = "{BROKER}"\npassword = "{BROKER_PASSWORD}"\n')
    (base / "broker-password").write_text(BROKER_PASSWORD + "\n")
    (base / "broker.toml").write_text(broker_toml(base, base / "broker-password"))
    with Cluster(base, bookies=2, brokers=2, quorum=(2, 2, 2), partitions=PARTITIONS,
                 broker_args=["--config", str(base / "broker.toml")]) as c:
        targets = {b: target_broker(b, [1, 2]) for b in range(c.bundles)}
        deadline = time.monotonic() + 60
        while c.bundle_owners() != targets:
            assert time.monotonic() < deadline, c.bundle_owners()
            time.sleep(0.3)
        admin = AdminClient(client_config(c))
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(30)
        owners = {c.partition_owner(TOPIC, p) for p in range(PARTITIONS)}
        assert owners == {1, 2}, owners
        yield c


def _producer(cluster: Cluster, transactional_id: str) -> Any:
    return Producer({**client_config(cluster), "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                     "linger.ms": 5})


def _read_committed(cluster: Cluster, topic: str, expected: int) -> list[str]:
    return read_committed(client_config(cluster), topic, expected, PARTITIONS)


def _transaction(producer: Any, prefix: str, count: int, commit: bool) -> list[str]:
    return run_transaction(producer, TOPIC, prefix, count, commit, timeout_s=30)


def test_commits_span_both_brokers_over_the_inter_broker_login(cluster: Cluster) -> None:
    committed: list[str] = []
    aborted: list[str] = []
    for coordinator in (1, 2):  # each broker sends markers to the other's partitions
        producer = _producer(cluster, _key_owned_by(cluster, TXN_TOPIC, coordinator, "stx"))
        producer.init_transactions(30)
        committed += _transaction(producer, f"c{coordinator}", 40, commit=True)
        aborted += _transaction(producer, f"a{coordinator}", 20, commit=False)
        committed += _transaction(producer, f"d{coordinator}", 40, commit=True)
    seen = _read_committed(cluster, TOPIC, len(committed))
    assert sorted(seen) == sorted(committed), cluster.logs()
    assert not set(aborted) & set(seen)
    for node_id in (1, 2):
        log = cluster.brokers[node_id].log()
        assert "inter-broker login" not in log and BROKER_PASSWORD not in log


def test_transactional_offsets_reach_a_group_on_the_other_broker(cluster: Cluster) -> None:
    source = "secured-source"
    admin = AdminClient(client_config(cluster))
    for future in admin.create_topics([NewTopic(source, PARTITIONS, 1)]).values():
        future.result(30)
    feeder = Producer({**client_config(cluster), "acks": "all"})
    for i in range(40):
        feeder.produce(source, value=f"m-{i}".encode(), partition=i % PARTITIONS)
    assert feeder.flush(30) == 0
    for txn_broker, group_broker in ((1, 2), (2, 1)):
        txn_id = _key_owned_by(cluster, TXN_TOPIC, txn_broker, f"eos{txn_broker}")
        group = _key_owned_by(cluster, GROUP_TOPIC, group_broker, f"group{group_broker}")
        consumer = Consumer({**client_config(cluster), "group.id": group,
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]
        try:
            consumer.assign([TopicPartition(source, p, -2) for p in range(PARTITIONS)])
            batch: list[Any] = []
            deadline = time.monotonic() + 30
            while len(batch) < 40 and time.monotonic() < deadline:
                batch += [m for m in consumer.consume(40, 1.0) if m.error() is None]
            assert len(batch) == 40
            producer = _producer(cluster, txn_id)
            producer.init_transactions(30)
            producer.begin_transaction()
            for m in batch:
                producer.produce(TOPIC, value=b"out-" + (m.value() or b""),
                                 partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(partitions),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            committed = consumer.committed(partitions, 30)
            assert sorted(tp.offset for tp in committed) == [10] * PARTITIONS, cluster.logs()
        finally:
            consumer.close()


def test_a_wrong_inter_broker_password_is_a_clear_error_not_a_crash(cluster: Cluster) -> None:
    base = cluster.base
    (base / "wrong-password").write_text("not-the-broker-password\n")
    (base / "broker-wrong.toml").write_text(broker_toml(base, base / "wrong-password"))
    cluster.broker_args = ["--config", str(base / "broker-wrong.toml")]
    broker = cluster.add_broker(3)
    try:
        log = broker.log()
        assert "security.inter_broker_password does not match" in log, log
        # once it coordinates transactions, its markers for the others' partitions are refused
        targets = {b: target_broker(b, [1, 2, 3]) for b in range(cluster.bundles)}
        deadline = time.monotonic() + 60
        while cluster.bundle_owners() != targets:
            assert time.monotonic() < deadline, cluster.bundle_owners()
            time.sleep(0.3)
        assert {cluster.partition_owner(TOPIC, p) for p in range(PARTITIONS)} - {3}
        producer = _producer(cluster, _key_owned_by(cluster, TXN_TOPIC, 3, "wrongpw"))
        producer.init_transactions(30)
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.produce(TOPIC, value=b"never-committed", partition=p)
        try:
            producer.commit_transaction(10)
        except KafkaException:
            pass  # the outcome for the client does not matter here; the broker's log does
        deadline = time.monotonic() + 30
        # the whole log: the markers' retries log tracebacks that push it out of log()'s tail
        while "inter-broker login to broker" not in broker.log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.3)
        log = broker.log_path.read_text(errors="replace")  # the whole log
        assert "inter_broker_password" in log.split("inter-broker login to broker", 1)[1]
        assert "not-the-broker-password" not in log
        time.sleep(3)
        assert broker.alive, broker.log()
        assert log.count("broker 3 ready on") == 1  # started once: no crash loop
        assert log.count("inter-broker login to broker") <= 2  # one line per peer, not a flood
    finally:
        broker.stop()
        cluster.brokers.pop(3, None)
