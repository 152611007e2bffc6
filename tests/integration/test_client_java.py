"""Apache Kafka's Java client 4.3 (kafka-clients, through tests/support/java_clients.py)
against `ledgerwire standalone`: produce with the Java defaults (idempotent, acks=all), consume
with both group protocols (classic and KIP-848 `consumer`), transactions read back
read_committed, and the everyday AdminClient calls.
"""

from __future__ import annotations

import pytest

from tests.support.java_clients import run_java
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce(server: Standalone, topic: str, count: int, **kafka: str) -> list[tuple[int, int]]:
    run = run_java("KafkaProduce", bootstrap=server.bootstrap, topic=topic, count=count,
                   kafka=kafka)
    config = run.one("config")
    if not kafka:
        assert config["enable.idempotence"] is True and config["acks"] == "-1"
    assert run.one("done")["count"] == count
    return [(e["partition"], e["offset"]) for e in run.events("sent")]


def test_java_producer_defaults_then_assign_consumer(module_standalone: Standalone) -> None:
    sent = produce(module_standalone, "java-defaults", 200)
    assert sent == [(0, i) for i in range(200)]
    run = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic="java-defaults",
                   count=200, timeout_ms=60_000)
    records = run.events("record")
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (i, f"k{i}", f"v{i}") for i in range(200)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_java_producer_codecs(module_standalone: Standalone, codec: str) -> None:
    topic = f"java-codec-{codec}"
    assert len(produce(module_standalone, topic, 50, **{"compression.type": codec})) == 50
    run = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic=topic, count=50)
    assert [r["value"] for r in run.events("record")] == [f"v{i}" for i in range(50)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_group_protocols(module_standalone: Standalone, protocol: str) -> None:
    topic = f"java-group-{protocol}"
    created = run_java("KafkaAdmin", bootstrap=module_standalone.bootstrap, op="create_topics",
                       topics=topic, partitions=3)
    assert created.one("created")["topic"] == topic
    produce(module_standalone, topic, 90)
    group = f"java-{protocol}"
    run = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic=topic,
                   group=group, count=90, timeout_ms=90_000,
                   kafka={"group.protocol": protocol})
    done = run.one("done")
    assert done["count"] == 90
    assert sorted(done["assignment"]) == [f"{topic}:{p}" for p in range(3)]
    assert sum(c["offset"] for c in done["committed"]) == 90
    # a second member of the same group starts from the committed offsets: nothing left
    again = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic=topic,
                     group=group, count=1, timeout_ms=8_000,
                     kafka={"group.protocol": protocol})
    assert again.one("done")["count"] == 0


def test_java_transactions_read_committed(module_standalone: Standalone) -> None:
    topic = "java-txn"
    run = run_java("KafkaTransactions", bootstrap=module_standalone.bootstrap, topic=topic,
                   transactional_id="java-txn-1", committed=7, aborted=4)
    assert run.one("done")
    committed = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic=topic,
                         count=11, timeout_ms=10_000,
                         kafka={"isolation.level": "read_committed"})
    assert [r["value"] for r in committed.events("record")] == [f"committed-{i}" for i in range(7)]
    uncommitted = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topic=topic,
                           count=11, timeout_ms=30_000,
                           kafka={"isolation.level": "read_uncommitted"})
    values = [r["value"] for r in uncommitted.events("record")]
    assert values == [f"committed-{i}" for i in range(7)] + [f"aborted-{i}" for i in range(4)]


def test_java_admin_topics_cluster_configs(module_standalone: Standalone) -> None:
    boot = module_standalone.bootstrap
    created = run_java("KafkaAdmin", bootstrap=boot, op="create_topics",
                       topics="java-admin-a,java-admin-b", partitions=2)
    assert sorted(e["topic"] for e in created.events("created")) == [
        "java-admin-a", "java-admin-b"]
    again = run_java("KafkaAdmin", bootstrap=boot, op="create_topics", topics="java-admin-a")
    assert again.one("error")["error"] == "TopicExistsException"
    described = run_java("KafkaAdmin", bootstrap=boot, op="describe_topics",
                         topics="java-admin-a,java-admin-b")
    topics = {t["name"]: t for t in described.events("topic")}
    assert [p["partition"] for p in topics["java-admin-a"]["partitions"]] == [0, 1]
    assert topics["java-admin-a"]["id"] != topics["java-admin-b"]["id"]
    cluster = run_java("KafkaAdmin", bootstrap=boot, op="describe_cluster").one("cluster")
    assert cluster["nodes"] and cluster["controller"] in cluster["nodes"]
    configs = run_java("KafkaAdmin", bootstrap=boot, op="describe_configs", type="TOPIC",
                       name="java-admin-a").one("configs")["entries"]
    assert configs["cleanup.policy"]["value"] == "delete"
    altered = run_java("KafkaAdmin", bootstrap=boot, op="incremental_alter_configs", type="TOPIC",
                       name="java-admin-a", set="retention.ms:3600000")
    assert altered.one("altered")
    configs = run_java("KafkaAdmin", bootstrap=boot, op="describe_configs", type="TOPIC",
                       name="java-admin-a").one("configs")["entries"]
    assert configs["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
                                       "read_only": False, "sensitive": False}
