"""aiokafka (asyncio; ApiVersions v0, Produce v7, Fetch v11) against `ledgerwire standalone`."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.support.messages import CODECS, Message, make_messages
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 20_000


async def roundtrip(bootstrap: str, topic: str, codec: str, messages: list[Message]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    await admin.close()

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if codec == "none" else codec,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, key=m.key, value=m.value, headers=list(m.headers),
                timestamp_ms=m.timestamp_ms,
            )
            for m in messages
        ]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [md.offset for md in metadata] == list(range(len(messages)))

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < len(messages):
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=500), 30)
            got.extend(batch.get(tp, []))
        for record, expected in zip(got, messages, strict=True):
            assert record.offset == expected.index
            assert record.key == expected.key
            assert record.value == expected.value
            assert tuple(record.headers) == expected.headers
            assert record.timestamp == expected.timestamp_ms
        assert await consumer.end_offsets([tp]) == {tp: len(messages)}
        found = await consumer.offsets_for_times({tp: messages[4321].timestamp_ms})
        assert found[tp].offset == 4321
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(module_standalone: Standalone, codec: str) -> None:
    messages = make_messages(COUNT, seed=200 + CODECS.index(codec))
    asyncio.run(roundtrip(module_standalone.bootstrap, f"aio-{codec}", codec, messages))
