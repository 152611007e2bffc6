"""Test helper: wait until a consumer group's offsets are durable on each bundle's owner."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient

K = TypeVar("K", bound=Hashable)


async def wait_committed(addresses: dict[K, str], group: str, topic: str,
                         timeout_s: float = 60.0) -> None:
    """Until `group`'s committed offset of queue 0 of `topic` reaches the queue's end on every
    broker of `addresses` (any key -> "host:port"), as that broker answers it: committed
    offsets are answered once they are durable."""
    seen: dict[K, tuple[int | None, int]] = {}
    with trio.move_on_after(timeout_s):
        while True:
            for key, address in addresses.items():
                client = await RawClient.connect(address)
                try:
                    end = await client.call(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
                    committed = await client.call(RC.QUERY_CONSUMER_OFFSET, {
                        "consumerGroup": group, "topic": topic, "queueId": 0})
                finally:
                    await client.aclose()
                assert end.code == ResponseCode.SUCCESS, end.remark
                seen[key] = (int(committed.ext_fields["offset"])
                             if committed.code == ResponseCode.SUCCESS else None,
                             int(end.ext_fields["offset"]))  # fmt: skip
            if all(c is not None and c >= e for c, e in seen.values()):
                return
            await trio.sleep(0.5)
    raise AssertionError(f"(committed, end) by broker never met: {seen}")
