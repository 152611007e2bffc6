"""KIP-932 share groups with librdkafka's share consumer (confluent-kafka's ShareConsumer, the
PyPI wheel) against `ledgerwire standalone`: two consumers in explicit acknowledgement mode
share one partition; together they accept every record exactly once, a released record comes
back with delivery count 2, a rejected one never comes back.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 40
RELEASED, REJECTED = 3, 5


def test_two_share_consumers_accept_each_record_once(module_standalone: Standalone) -> None:
    topic, group = "share-librdkafka", "share-librdkafka-g"
    bootstrap = module_standalone.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest",
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(COUNT):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0

    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit",
                                "max.poll.records": "5"})  # small polls: both get some
                 for _ in range(2)]
    seen: list[tuple[int, int, int, str]] = []  # (consumer, offset, delivery count, action)
    failed_commits: list[object] = []
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.monotonic() + 90
        accepted: set[int] = set()
        while time.monotonic() < deadline and len(accepted) < COUNT - 1:
            for index, c in enumerate(consumers):
                messages = c.poll(0.5)
                for m in messages:
                    assert m.error() is None, m.error()
                    offset, count = m.offset(), m.delivery_count()
                    if offset == REJECTED:
                        action, kind = "reject", AcknowledgeType.REJECT
                    elif offset == RELEASED and count == 1:
                        action, kind = "release", AcknowledgeType.RELEASE
                    else:
                        action, kind = "accept", AcknowledgeType.ACCEPT
                        accepted.add(offset)
                    c.acknowledge(m, kind)
                    seen.append((index, offset, count, action))
                if len(messages):
                    result = c.commit_sync(30)
                    failed_commits += [e for e in result.values() if e is not None]
        time.sleep(2)  # the rejected one must not come back
        for c in consumers:
            for m in c.poll(0.5):
                seen.append((-1, m.offset(), m.delivery_count(), "late"))
    finally:
        for c in consumers:
            c.close()

    assert failed_commits == []
    accepts = Counter(o for _, o, _, action in seen if action == "accept")
    assert sorted(accepts) == [o for o in range(COUNT) if o != REJECTED]
    assert set(accepts.values()) == {1}, "no record accepted twice"
    assert [(o, n, a) for _, o, n, a in seen if o == RELEASED] == [
        (RELEASED, 1, "release"), (RELEASED, 2, "accept")]
    assert [(o, n, a) for _, o, n, a in seen if o == REJECTED] == [(REJECTED, 1, "reject")]
    assert {i for i, _, _, _ in seen if i >= 0} == {0, 1}, "both consumers got records"
