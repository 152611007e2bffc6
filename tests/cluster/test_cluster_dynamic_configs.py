"""Dynamic broker configs are shared by a cluster's brokers: a real ZooKeeper, one bookie and
two `ledgerwire broker` processes; librdkafka's admin client alters the cluster default through
one broker and a per-broker value on the other, and each broker reports and enforces what
applies to it, without a restart.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.cluster.cluster_processes import Cluster
from tests.support.java_clients import run_java

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def alter(admin: AdminClient, broker: str, name: str, value: str) -> None:
    resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)


def described(admin: AdminClient, broker: str, name: str) -> tuple[str, int]:
    resource = ConfigResource(ResourceType.BROKER, broker)
    entry = admin.describe_configs([resource])[resource].result(30)[name]
    return entry.value, entry.source


def eventually(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()  # type: ignore[operator]
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def produce_outcomes(bootstrap: str, partitions: int) -> dict[int, int | None]:
    """partition -> error code (None: stored) of one 5000-byte record to each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000,
                         "message.max.bytes": 10_000_000})
    outcomes: dict[int, int | None] = {}

    def delivered(err: KafkaError | None, msg: object) -> None:
        outcomes[msg.partition()] = err.code() if err else None  # type: ignore[attr-defined]

    for partition in range(partitions):
        producer.produce("sizes", b"x" * 5000, partition=partition, on_delivery=delivered)
    producer.flush(60)
    return outcomes


def test_dynamic_configs_shared_by_cluster_brokers(tmp_path: Path) -> None:
    with Cluster(tmp_path / "cluster", bookies=1, brokers=2, quorum=(1, 1, 1),
                 partitions=4) as cluster:
        first = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker_ports[1]}"})
        second = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.broker_ports[2]}"})
        first.create_topics([NewTopic("sizes", 4)])["sizes"].result(30)
        assert set(produce_outcomes(cluster.bootstrap, 4).values()) == {None}

        # the cluster default, set through broker 1 only (Java names the default resource)
        java = run_java("KafkaAdmin", bootstrap=f"127.0.0.1:{cluster.broker_ports[1]}",
                        op="incremental_alter_configs", type="BROKER", name="",
                        set="message.max.bytes:2000")
        assert java.one("altered")
        eventually(lambda: _expect(described(second, "2", "message.max.bytes"),
                                   ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)))
        assert set(produce_outcomes(cluster.bootstrap, 4).values()) == {
            KafkaError.MSG_SIZE_TOO_LARGE}

        # broker 2's own value wins over the default there, and only there
        alter(second, "2", "message.max.bytes", "100000")
        assert described(second, "2", "message.max.bytes") == (
            "100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        eventually(lambda: _expect(described(first, "1", "message.max.bytes"),
                                   ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)))
        outcomes = produce_outcomes(cluster.bootstrap, 4)
        owners = {p: cluster.partition_owner("sizes", p) for p in range(4)}
        for partition, owner in owners.items():
            expected = None if owner == 2 else KafkaError.MSG_SIZE_TOO_LARGE
            assert outcomes[partition] == expected, (owners, outcomes)


def _expect(got: object, wanted: object) -> None:
    assert got == wanted, got
