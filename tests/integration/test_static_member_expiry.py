"""A static group member (librdkafka, group.instance.id) that stops without leaving (static
members do not send LeaveGroup on close) is expired within its session timeout, and the group
can be deleted right after; measured from outside against `ledgerwire standalone`."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_S = 6.0  # the broker's minimum session timeout


def members(admin: AdminClient, group: str) -> int:
    return len(admin.describe_consumer_groups([group])[group].result(10).members)


def test_static_member_expires_within_its_session(module_standalone: Standalone) -> None:
    admin = AdminClient({"bootstrap.servers": module_standalone.bootstrap})
    admin.create_topics([NewTopic("static-expiry", 1)])["static-expiry"].result(30)
    consumer = Consumer({"bootstrap.servers": module_standalone.bootstrap,
                         "group.id": "static-expiry", "group.instance.id": "worker-1",
                         "session.timeout.ms": int(SESSION_S * 1000),
                         "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"})
    consumer.subscribe(["static-expiry"])
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    assert members(admin, "static-expiry") == 1
    consumer.close()  # a static member: no LeaveGroup, the session has to run out
    closed = time.monotonic()
    while members(admin, "static-expiry") and time.monotonic() - closed < 30:
        time.sleep(0.1)
    gone_after = time.monotonic() - closed
    # the last heartbeat was at most one interval before close; a loaded machine adds latency
    assert SESSION_S - 0.5 <= gone_after <= SESSION_S + 1.5, gone_after
    deleted = admin.delete_consumer_groups(["static-expiry"])
    deleted["static-expiry"].result(10)  # not NON_EMPTY_GROUP: the group is Empty at once
