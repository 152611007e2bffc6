"""confluent-kafka (librdkafka) against a real `ledgerwire standalone` subprocess."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.messages import CODECS, Message, make_messages
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 20_000


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(30)


def produce_all(
    bootstrap: str, topic: str, messages: list[Message], **conf: object
) -> dict[bytes, int]:
    """Produce with acks=all; return key -> offset from the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    offsets: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets[msg.key()] = msg.offset()  # type: ignore[attr-defined]

    for m in messages:
        while True:
            try:
                producer.produce(
                    topic,
                    key=m.key,
                    value=m.value,
                    headers=list(m.headers),
                    timestamp=m.timestamp_ms,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert errors == []
    return offsets


def consume_all(bootstrap: str, topic: str, count: int, partition: int = 0) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[object] = []
    idle = 0
    while len(got) < count and idle < 50:
        batch = consumer.consume(num_messages=5000, timeout=0.5)
        idle = 0 if batch else idle + 1
        for msg in batch:
            assert msg.error() is None, msg.error()
            got.append(msg)
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(module_standalone: Standalone, codec: str) -> None:
    bootstrap = module_standalone.bootstrap
    topic = f"ck-{codec}"
    create_topic(bootstrap, topic)
    messages = make_messages(COUNT, seed=CODECS.index(codec))
    offsets = produce_all(bootstrap, topic, messages, **{"compression.type": codec})
    assert sorted(offsets.values()) == list(range(COUNT)), "offsets must be dense from 0"

    got = consume_all(bootstrap, topic, COUNT)
    assert len(got) == COUNT
    for msg, expected in zip(got, messages, strict=True):
        assert msg.offset() == offsets[expected.key]  # type: ignore[attr-defined]
        assert msg.key() == expected.key  # type: ignore[attr-defined]
        assert msg.value() == expected.value  # type: ignore[attr-defined]
        assert tuple(msg.headers() or ()) == expected.headers  # type: ignore[attr-defined]
        assert msg.timestamp()[1] == expected.timestamp_ms  # type: ignore[attr-defined]


def test_list_offsets_and_delete_topic(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    topic = "ck-offsets"
    create_topic(bootstrap, topic)
    messages = make_messages(3000, seed=7)
    produce_all(bootstrap, topic, messages)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-check"})
    tp = TopicPartition(topic, 0)
    assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 3000)
    wanted = messages[1234].timestamp_ms
    found = consumer.offsets_for_times([TopicPartition(topic, 0, wanted)], timeout=10)
    assert found[0].offset == 1234
    past_end = consumer.offsets_for_times([TopicPartition(topic, 0, wanted + 10**9)], timeout=10)
    assert past_end[0].offset in (-1, 3000)  # Kafka answers -1 (no such offset): "end" to clients
    consumer.close()

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    assert topic not in admin.list_topics(timeout=10).topics
    # A topic of the same name starts empty: the old data is gone, not reattached.
    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-check-2"})
    assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 0)
    consumer.close()


def test_unknown_topic_is_auto_created(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    messages = make_messages(100, seed=3)
    offsets = produce_all(bootstrap, "ck-auto-created", messages)
    assert sorted(offsets.values()) == list(range(100))


def test_create_existing_topic_fails(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    create_topic(bootstrap, "ck-twice")
    with pytest.raises(KafkaException) as info:
        create_topic(bootstrap, "ck-twice")
    assert info.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
