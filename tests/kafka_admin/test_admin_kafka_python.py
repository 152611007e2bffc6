"""Admin APIs with kafka-python's KafkaAdminClient against the in-process stack."""

from __future__ import annotations

import pytest
import trio

from tests.support.kafka_python import poll_records
from tests.support.security_stack import secure_stack

pytestmark = pytest.mark.integration


def admin_session(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import (
        AlterConfigOp,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        created = admin.create_topics(
            [NewTopic("kp", 1, 1, topic_configs={"retention.ms": "100000"})])
        assert created["topics"][0]["error_code"] == 0
        topic = ConfigResource(ConfigResourceType.TOPIC, "kp")
        described = admin.describe_configs([topic])["topic"]["kp"]
        assert described["retention.ms"]["value"] == "100000"
        assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

        # (kafka-python 3 sends IncrementalAlterConfigs when the broker offers it)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp",
                                            configs={"max.message.bytes": "5000"})])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", configs={
            "retention.bytes": (AlterConfigOp.SET, "123456")})], incremental=True)
        described = admin.describe_configs([topic])["topic"]["kp"]
        assert described["max.message.bytes"]["value"] == "5000"
        assert described["retention.bytes"]["value"] == "123456"
        assert described["retention.ms"]["value"] == "100000"

        result = admin.create_partitions({"kp": NewPartitions(3)})
        assert result.results[0].error_code == 0

        producer = KafkaProducer(bootstrap_servers=bootstrap)
        try:
            for _ in range(5):
                producer.send("kp", b"x", partition=0).get(timeout=10)
        finally:
            producer.close(timeout=5)
        deleted = admin.delete_records({TopicPartition("kp", 0): 3})
        assert deleted[TopicPartition("kp", 0)]["low_watermark"] == 3

        # kafka-python 3 produces idempotently: its producer shows up in DescribeProducers
        producers = admin.describe_producers([TopicPartition("kp", 0)])
        states = producers[TopicPartition("kp", 0)].active_producers
        assert len(states) == 1 and states[0].last_sequence == 4

        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] == "secure-test"
        assert [b["broker_id"] for b in cluster["brokers"]] == [1]

        consumer = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kg",
                                 auto_offset_reset="earliest")
        try:
            assert len(poll_records(consumer, 2)) == 2  # offsets 3 and 4 are left
            consumer.commit()
        finally:
            consumer.close()
        assert [g["group_id"] for g in admin.list_groups()] == ["kg"]
        assert admin.describe_groups(["kg"])["kg"]["group_state"] == "Empty"
        assert admin.delete_groups(["kg"]) == {"kg": "OK"}
        assert admin.list_groups() == []
    finally:
        admin.close()


async def test_kafka_python_admin_client() -> None:
    async with secure_stack() as stack:
        await trio.to_thread.run_sync(admin_session, stack.bootstrap)
