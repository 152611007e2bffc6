"""kafka-python 3 (idempotent by default) against a real `ledgerwire standalone` subprocess."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support.messages import CODECS, make_messages
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 20_000


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(module_standalone: Standalone, codec: str) -> None:
    bootstrap = module_standalone.bootstrap
    topic = f"kp-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()

    messages = make_messages(COUNT, seed=100 + CODECS.index(codec))
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if codec == "none" else codec,
    )
    futures = [
        producer.send(
            topic, key=m.key, value=m.value, headers=list(m.headers), timestamp_ms=m.timestamp_ms
        )
        for m in messages
    ]
    producer.flush(60)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(COUNT))

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    idle = 0
    while len(got) < COUNT and idle < 40:
        polled = consumer.poll(timeout_ms=500, max_records=5000)
        idle = 0 if polled else idle + 1
        for records in polled.values():
            got.extend(records)
    assert len(got) == COUNT
    for record, expected in zip(got, messages, strict=True):
        assert record.offset == expected.index
        assert record.key == expected.key
        assert record.value == expected.value
        assert tuple(record.headers) == expected.headers
        assert record.timestamp == expected.timestamp_ms

    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: COUNT}
    found = consumer.offsets_for_times({tp: messages[777].timestamp_ms})
    assert found[tp].offset == 777
    consumer.close()


def test_delete_topic(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp-delete", num_partitions=2, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(50):
        producer.send("kp-delete", value=b"x%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    admin.delete_topics(["kp-delete"])
    assert "kp-delete" not in admin.list_topics()
    admin.close()
