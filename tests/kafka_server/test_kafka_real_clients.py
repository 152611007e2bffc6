"""Real Kafka clients against the in-process server: kafka-python and confluent-kafka.

The server runs in the test's Trio loop; each client runs in a worker thread
(`trio.to_thread.run_sync`).  Producers send a few thousand keyed messages with headers under
every codec; consumers (manual assign, no group) read them back and every key, value, header
and offset must be identical.  Admin clients create, describe, grow and delete topics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.kafka_server.conftest import KafkaStack

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3 loads its JSON schemas with importlib.resources.read_text/open_text.
    pytest.mark.filterwarnings("ignore:.* is deprecated. Use files:DeprecationWarning"),
]

MESSAGES = 2000
PARTITIONS = 2
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CLIENT_TIMEOUT_S = 60.0


def expected_messages(tag: str) -> list[tuple[bytes, bytes, list[Any]]]:
    return [
        (f"{tag}-key-{i}".encode(), (f"{tag}-value-{i}-" + "x" * (i % 97)).encode(),
         [("seq", str(i).encode()), ("tag", tag.encode())])
        for i in range(MESSAGES)
    ]


def by_partition(messages: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
                 ) -> dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]]:
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for i, message in enumerate(messages):
        out[i % PARTITIONS].append(message)
    return out


async def in_thread(fn: Callable[[], Any]) -> Any:
    with trio.fail_after(CLIENT_TIMEOUT_S * 2):
        return await trio.to_thread.run_sync(fn)


# --- kafka-python ---------------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, codec: str,
                         messages: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if codec == "none" else codec,
                             acks="all", linger_ms=5, request_timeout_ms=20000)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, partition=i % PARTITIONS)
                   for i, (k, v, h) in enumerate(messages)]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        for future in futures:
            future.get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, count: int) -> dict[int, list[Any]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(
                    (r.offset, r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
                    for r in records)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
async def test_kafka_python_round_trip(stack: KafkaStack, codec: str) -> None:
    topic = f"kp-{codec}"
    await stack.topics.create_topic(topic, PARTITIONS)
    messages = expected_messages(topic)
    await in_thread(lambda: kafka_python_produce(stack.bootstrap, topic, codec, messages))
    got = await in_thread(lambda: kafka_python_consume(stack.bootstrap, topic, MESSAGES))
    for partition, sent in by_partition(messages).items():
        assert [(o, k, v, h) for o, k, v, h in got[partition]] == [
            (offset, k, v, h) for offset, (k, v, h) in enumerate(sent)]


def kafka_python_admin(bootstrap: str) -> dict[str, Any]:
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kp-admin", 2, 1, topic_configs={"retention.ms": "60000"})])
        topics_after_create = set(admin.list_topics())
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        admin.create_partitions({"kp-admin": NewPartitions(total_count=4)})
        described = admin.describe_topics(["kp-admin"])
        admin.delete_topics(["kp-admin"])
        return {"topics": topics_after_create, "configs": configs, "described": described,
                "after_delete": set(admin.list_topics())}
    finally:
        admin.close()


async def test_kafka_python_admin_client(stack: KafkaStack) -> None:
    result = await in_thread(lambda: kafka_python_admin(stack.bootstrap))
    assert "kp-admin" in result["topics"]
    assert "kp-admin" not in result["after_delete"]
    assert len(result["described"][0]["partitions"]) == 4
    assert "retention.ms" in repr(result["configs"]) and "60000" in repr(result["configs"])


# --- confluent-kafka ------------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, codec: str,
                      messages: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 5, "acks": "all", "message.timeout.ms": 30000})

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i, (k, v, h) in enumerate(messages):
        while True:
            try:
                producer.produce(topic, key=k, value=v, headers=list(h),
                                 partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == []


def confluent_consume(bootstrap: str, topic: str, count: int) -> dict[int, list[Any]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            message: Any
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error():
                    raise AssertionError(message.error())
                got[message.partition()].append(
                    (message.offset(), message.key(), message.value(),
                     [(k, bytes(v)) for k, v in (message.headers() or [])]))
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
async def test_confluent_kafka_round_trip(stack: KafkaStack, codec: str) -> None:
    topic = f"ck-{codec}"
    await stack.topics.create_topic(topic, PARTITIONS)
    messages = expected_messages(topic)
    await in_thread(lambda: confluent_produce(stack.bootstrap, topic, codec, messages))
    got = await in_thread(lambda: confluent_consume(stack.bootstrap, topic, MESSAGES))
    for partition, sent in by_partition(messages).items():
        assert got[partition] == [(offset, k, v, h) for offset, (k, v, h) in enumerate(sent)]


def confluent_admin(bootstrap: str) -> dict[str, Any]:
    from confluent_kafka import admin as ck

    client = ck.AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics(
            [ck.NewTopic("ck-admin", 2, 1, config={"cleanup.policy": "delete"})],
            operation_timeout=10).values():
        future.result(timeout=20)
    listed = set(client.list_topics(timeout=10).topics)
    resource = ck.ConfigResource(ck.ConfigResource.Type.TOPIC, "ck-admin")
    configs = client.describe_configs([resource])[resource].result(timeout=20)
    for future in client.create_partitions([ck.NewPartitions("ck-admin", 3)]).values():
        future.result(timeout=20)
    partitions = len(client.list_topics("ck-admin", timeout=10).topics["ck-admin"].partitions)
    for future in client.delete_topics(["ck-admin"], operation_timeout=10).values():
        future.result(timeout=20)
    return {"listed": listed, "configs": {k: v.value for k, v in configs.items()},
            "partitions": partitions, "after": set(client.list_topics(timeout=10).topics)}


async def test_confluent_admin_client(stack: KafkaStack) -> None:
    result = await in_thread(lambda: confluent_admin(stack.bootstrap))
    assert "ck-admin" in result["listed"]
    assert result["configs"]["cleanup.policy"] == "delete"
    assert result["configs"]["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert result["partitions"] == 3
    assert "ck-admin" not in result["after"]


async def test_confluent_idempotent_producer(stack: KafkaStack) -> None:
    topic = "ck-idempotent"
    await stack.topics.create_topic(topic, PARTITIONS)
    messages = expected_messages(topic)[:500]

    def produce() -> None:
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True,
                             "compression.type": "lz4", "linger.ms": 2})
        for i, (k, v, h) in enumerate(messages):
            producer.produce(topic, key=k, value=v, headers=list(h), partition=i % PARTITIONS)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0

    await in_thread(produce)
    got = await in_thread(lambda: confluent_consume(stack.bootstrap, topic, len(messages)))
    for partition, sent in by_partition(messages).items():
        assert got[partition] == [(offset, k, v, h) for offset, (k, v, h) in enumerate(sent)]


# --- aiokafka (ApiVersions v0, no flexible versions) ----------------------------------------------


def aiokafka_round_trip(bootstrap: str, topic: str,
                        messages: list[tuple[bytes, bytes, list[Any]]]) -> dict[int, list[Any]]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> dict[int, list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip",
                                    linger_ms=5)
        await producer.start()
        try:
            batch_futures = [await producer.send(topic, key=k, value=v, headers=h,
                                                 partition=i % PARTITIONS)
                             for i, (k, v, h) in enumerate(messages)]
            await producer.flush()
            await asyncio.gather(*batch_futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while sum(map(len, got.values())) < len(messages) and time.monotonic() < deadline:
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    got[tp.partition].extend(
                        (r.offset, r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
                        for r in records)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


async def test_aiokafka_round_trip(stack: KafkaStack) -> None:
    topic = "aio"
    await stack.topics.create_topic(topic, PARTITIONS)
    messages = expected_messages(topic)[:1000]
    got = await in_thread(lambda: aiokafka_round_trip(stack.bootstrap, topic, messages))
    for partition, sent in by_partition(messages).items():
        assert got[partition] == [(offset, k, v, h) for offset, (k, v, h) in enumerate(sent)]
