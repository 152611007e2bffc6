"""consumeEnable=false stops the official C++ push consumer receiving (its pulls get
NO_PERMISSION), and turning it back on lets the consumer catch up without a restart."""

from __future__ import annotations

import time

import pytest
import trio

from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.cpp_client import Consumer, message, producer, send_sync_patiently

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUIET_S = 4.0  # several C++ pull rounds


async def test_consume_disabled_group_receives_nothing_until_enabled(
        stack: RocketMQStack) -> None:
    await stack.broker.ensure_topic("gated", 1)
    groups = stack.broker.subscription_groups
    await groups.put("CG_GATED", {"groupName": "CG_GATED", "consumeEnable": False})

    def run() -> tuple[int, int]:
        p = producer(stack.name_server_addr, "PG_GATED")
        for i in range(3):
            send_sync_patiently(p, message("gated", b"m%d" % i, "T", f"k{i}"))
        p.shutdown()
        c = Consumer(stack.name_server_addr, "CG_GATED", "gated", "*")
        try:
            time.sleep(QUIET_S)
            while_disabled = len(c.received)
            trio.from_thread.run(groups.put, "CG_GATED",
                                 {"groupName": "CG_GATED", "consumeEnable": True})
            c.wait_for(lambda got: len(got) >= 3, 30)
            return while_disabled, len(c.received)
        finally:
            c.shutdown()

    while_disabled, after = await trio.to_thread.run_sync(run)
    assert while_disabled == 0
    assert after == 3
