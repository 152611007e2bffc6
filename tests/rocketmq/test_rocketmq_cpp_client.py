"""The official C++ client (rocketmq-client-python 0.5.0rc2) against the in-process broker."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.cpp_client import (
    Consumer,
    SendStatus,
    message,
    patiently,
    producer,
    send_async_patiently,
    send_sync_patiently,
)

pytestmark = pytest.mark.integration


async def test_sync_async_oneway_sends_and_tag_subscription(stack: RocketMQStack) -> None:
    ns = stack.name_server_addr

    def produce() -> list[str]:
        p = producer(ns, "PG_SENDS")
        statuses = []
        try:
            for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA"]):
                m = message("cpp_sends", f"sync-{i}".encode(), tag, f"key-{i}")
                statuses.append(send_sync_patiently(p, m))
            outcome = send_async_patiently(p, message("cpp_sends", b"async-0", "TagC",
                                                      "key-async"))
            assert outcome.startswith("ok:"), outcome
            for body, tag in ((b"oneway-0", "TagA"), (b"oneway-1", "TagB")):
                m = message("cpp_sends", body, tag, "key-oneway")
                patiently(partial(p.send_oneway, m))
        finally:
            p.shutdown()
        return [str(s) for s in statuses]

    statuses = await trio.to_thread.run_sync(produce)
    assert statuses == [str(SendStatus.OK)] * 4

    consumer = await trio.to_thread.run_sync(Consumer, ns, "CG_TAGS", "cpp_sends", "TagA || TagC")
    try:
        assert await trio.to_thread.run_sync(
            consumer.wait_for, lambda got: len(got) >= 5, 30), consumer.received
        await trio.sleep(1.0)  # nothing else may arrive
        received = list(consumer.received)
        got = sorted((r.tags, r.body, r.keys) for r in received)
        assert got == [
            ("TagA", b"oneway-0", "key-oneway"),
            ("TagA", b"sync-0", "key-0"),
            ("TagA", b"sync-3", "key-3"),
            ("TagC", b"async-0", "key-async"),
            ("TagC", b"sync-2", "key-2"),
        ]
        positions: dict[int, int] = {}
        for r in received:
            positions[r.queue_id] = max(positions.get(r.queue_id, 0), r.queue_offset + 1)

        # The group's consumption progress becomes durable in the offset store while the
        # consumer runs (its pulls carry the commit offset, and it persists every few seconds).
        # Not at shutdown: that last commit is oneway and unacknowledged, so a loaded machine
        # may not see it before the client closes its connection (failed in a 3-worker run).
        def committed_all() -> bool:
            for queue_id, next_offset in positions.items():
                committed = stack.broker.offsets.query("CG_TAGS", "cpp_sends", queue_id)
                if committed is None or committed < next_offset:
                    return False
            return True

        with trio.move_on_after(60):
            while not committed_all():  # noqa: ASYNC110 - the broker has no event for it
                await trio.sleep(0.05)
        assert committed_all(), positions
    finally:
        await trio.to_thread.run_sync(consumer.shutdown)


async def test_orderly_consumption_keeps_per_key_order(stack: RocketMQStack) -> None:
    ns = stack.name_server_addr

    def produce() -> None:
        p = producer(ns, "PG_ORDER", orderly=True)
        try:
            for i in range(30):
                key = f"order-{i % 3}"
                m = message("cpp_orderly", f"{key}:{i}".encode(), "T", key)
                patiently(partial(p.send_orderly_with_sharding_key, m, key))
        finally:
            p.shutdown()

    await trio.to_thread.run_sync(produce)

    def consume() -> list[str]:
        c = Consumer(ns, "CG_ORDER", "cpp_orderly", "*", orderly=True)
        try:
            assert c.wait_for(lambda got: len(got) >= 30, 40), len(c.received)
            return [r.body.decode() for r in c.received]
        finally:
            c.shutdown()

    bodies = await trio.to_thread.run_sync(consume)
    for key in ("order-0", "order-1", "order-2"):
        seq = [int(b.split(":")[1]) for b in bodies if b.startswith(key + ":")]
        assert seq == sorted(seq) and len(seq) == 10
