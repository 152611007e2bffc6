"""Admin APIs with confluent-kafka's AdminClient against the in-process stack.

Configs (describe / alter / incremental alter, validate_only, unknown names), create partitions,
delete records, consumer groups (list / describe / delete), describe cluster, and retention.ms
set through AlterConfigs trimming old ledgers.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
import trio
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.support.security_stack import secure_stack

pytestmark = pytest.mark.integration


def produce_each(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> list[Any]:
    """Produce one batch per value (flush after each); the delivery errors."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda err, _m: errors.append(err))
        producer.flush(10)
    return errors


def topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return dict(admin.describe_configs([resource])[resource].result(10))


def legacy_alter(admin: AdminClient, resource: ConfigResource, validate_only: bool = False) -> None:
    """AlterConfigs (key 33): deprecated in the client, still what older tools send."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = admin.alter_configs([resource], validate_only=validate_only)
    futures[resource].result(10)


def earliest(admin: AdminClient, topic: str, partition: int) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset


def configs_and_records(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic("cfg", 2, 1, config={"retention.ms": "3600000"})])
    created["cfg"].result(10)
    configs = topic_configs(admin, "cfg")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    # incremental: SET one, DELETE another; the change takes effect on the open partition
    assert produce_each(bootstrap, "cfg", [b"x" * 3000]) == [None]
    resource = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([resource])[resource].result(10)
    configs = topic_configs(admin, "cfg")
    assert configs["max.message.bytes"].value == "2048"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    errors = produce_each(bootstrap, "cfg", [b"x" * 3000])
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    # unknown names are refused; validate_only changes nothing
    bad = ConfigResource(ResourceType.TOPIC, "cfg", set_config={"no.such.config": "1"})
    with pytest.raises(KafkaException) as refused:
        legacy_alter(admin, bad)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    dry = ConfigResource(ResourceType.TOPIC, "cfg", set_config={"retention.ms": "1000"})
    legacy_alter(admin, dry, validate_only=True)
    assert topic_configs(admin, "cfg")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # legacy AlterConfigs replaces the whole set
    full = ConfigResource(ResourceType.TOPIC, "cfg", set_config={"retention.bytes": "1000000"})
    legacy_alter(admin, full)
    configs = topic_configs(admin, "cfg")
    assert configs["retention.bytes"].value == "1000000"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    admin.create_partitions([NewPartitions("cfg", 4)])["cfg"].result(10)
    assert len(admin.list_topics(timeout=10).topics["cfg"].partitions) == 4

    assert produce_each(bootstrap, "cfg", [b"v%d" % i for i in range(10)], partition=1) == \
        [None] * 10
    tp = TopicPartition("cfg", 1, 6)
    deleted = admin.delete_records([tp])[tp].result(10)
    assert deleted.low_watermark == 6
    assert earliest(admin, "cfg", 1) == 6
    out_of_range = TopicPartition("cfg", 1, 99)
    with pytest.raises(KafkaException) as refused:
        admin.delete_records([out_of_range])[out_of_range].result(10)
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    cluster = admin.describe_cluster().result(10)
    assert cluster.cluster_id == "secure-test" and [n.id for n in cluster.nodes] == [1]


def groups(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert produce_each(bootstrap, "grp", [b"a", b"b"]) == [None, None]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["grp"])
    seen = 0
    deadline = time.monotonic() + 20
    while seen < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == 2
    listed = admin.list_consumer_groups().result(10)
    assert "admin-g" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["admin-g"])["admin-g"].result(10)
    assert described.group_id == "admin-g"
    admin.delete_consumer_groups(["admin-g"])["admin-g"].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert "admin-g" not in {g.group_id for g in listed.valid}


async def test_confluent_admin_configs_partitions_records() -> None:
    async with secure_stack() as stack:
        await trio.to_thread.run_sync(configs_and_records, stack.bootstrap)


async def test_confluent_admin_groups() -> None:
    async with secure_stack() as stack:
        await trio.to_thread.run_sync(groups, stack.bootstrap)


def retention_through_alter_configs(bootstrap: str) -> tuple[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("ret", 1, 1)])["ret"].result(10)
    # every entry closes its ledger (segment.bytes maps to the ledger roll-over size)
    roll = ConfigResource(ResourceType.TOPIC, "ret", incremental_configs=[
        ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([roll])[roll].result(10)
    assert produce_each(bootstrap, "ret", [b"m%d" % i for i in range(6)]) == [None] * 6
    before = earliest(admin, "ret", 0)
    time.sleep(0.05)
    short = ConfigResource(ResourceType.TOPIC, "ret", incremental_configs=[
        ConfigEntry("retention.ms", "10", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([short])[short].result(10)
    return before, earliest(admin, "ret", 0)


async def test_retention_ms_through_alter_configs_trims_old_ledgers() -> None:
    async with secure_stack() as stack:
        before, after = await trio.to_thread.run_sync(retention_through_alter_configs,
                                                      stack.bootstrap)
        plog = stack.topics.open_partitions()[("ret", 0)]
        ledgers = len(stack.topics._partition_ledgers[("ret", 0)].ledgers)
        assert before == 0
        assert after >= 4, after  # every ledger but the newest ones went
        assert plog.log_start_offset == after
        assert ledgers <= 2, ledgers
