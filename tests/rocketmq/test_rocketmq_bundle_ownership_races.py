"""A RocketMQ bundle broker (gateway/rocketmq/cluster.py) losing its bundle while a request is
under way, with the stand-in ownership of tests/rocketmq/test_rocketmq_bundle_brokers.py made
to flip at the worst moment: during the open of the queue's log (the log is closed again and
the client told "not served here"), and during an append (stored, but not acknowledged).
Before gateway/rocketmq/bundle_logs.py both answered SUCCESS.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.cluster.bundle_placement import bundle_of
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.rocketmq.test_rocketmq_bundle_brokers import BUNDLES, MINE, Side, side

__all__ = ["side"]  # the fixture, shared with test_rocketmq_bundle_brokers.py

BUNDLE = 1


@pytest.fixture
def owned(side: Side) -> Iterator[set[int]]:
    """The bundles the stand-in ownership serves here, for a test to change."""
    bundles = set(MINE)
    ownership: Any = side.rocketmq.ownership
    ownership.bundle_is_local = bundles.__contains__
    try:
        yield bundles
    finally:
        bundles.update(MINE)


def _queue_partition(side: Side, topic: str) -> int:
    partition = side.rocketmq.queue_map.partition_of(topic, 8, BUNDLE, 0)
    assert partition is not None and bundle_of(topic, partition, BUNDLES) == BUNDLE
    return partition


async def test_a_bundle_released_while_its_queue_opens_is_not_served(
        side: Side, owned: set[int]) -> None:
    await side.topics.create_topic("orders", 8)
    partition = _queue_partition(side, "orders")
    topics: Any = side.topics
    real_open = topics.partition
    opened: list[Any] = []

    async def open_then_lose(topic: str, p: int) -> Any:
        plog = await real_open(topic, p)
        if topic == "orders":
            opened.append(plog)
            owned.discard(BUNDLE)  # released (another broker took it) while this opened
        return plog

    topics.partition = open_then_lose
    client = await RawClient.connect(side.addr(BUNDLE))
    try:
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {}, queue_id=0), b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r.remark
        assert "released" in (r.remark or "")
        [plog] = opened
        assert plog.closed  # not kept open: it would fence the new owner again
        assert plog.high_watermark == 0
        # once served here again, the queue opens and takes messages as before
        owned.add(BUNDLE)
        topics.partition = real_open
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {}, queue_id=0), b"y")
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert (await side.topics.partition("orders", partition)).high_watermark == 1
    finally:
        await client.aclose()


async def test_an_append_that_outlives_the_bundle_is_not_acknowledged(
        side: Side, owned: set[int]) -> None:
    await side.topics.create_topic("orders", 8)
    partition = _queue_partition(side, "orders")
    plog: Any = await side.topics.partition("orders", partition)
    real_append = plog.append_built  # a send's batch is built here: the trusted path

    async def append_then_lose(*args: Any, **kwargs: Any) -> Any:
        result = await real_append(*args, **kwargs)
        owned.discard(BUNDLE)  # the session expired while the entry was being stored
        return result

    plog.append_built = append_then_lose
    client = await RawClient.connect(side.addr(BUNDLE))
    try:
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {}, queue_id=0), b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r.remark
        assert "not acknowledged" in (r.remark or "")
        assert plog.high_watermark == 1  # stored (the new owner recovers it), not acked
        # and the next request is refused before anything is opened or appended
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {}, queue_id=0), b"y")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "not served here" in (r.remark or "")
        assert plog.high_watermark == 1
    finally:
        await client.aclose()
