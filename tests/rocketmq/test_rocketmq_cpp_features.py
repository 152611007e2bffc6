"""Retries and DLQ, delay levels and transactions with the official C++ client."""

from __future__ import annotations

import time

import pytest
import trio
from rocketmq.client import TransactionMQProducer, TransactionStatus

from protocols.rocketmq.topic_names import to_storage
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.cpp_client import (
    Consumer,
    message,
    producer,
    send_in_transaction_patiently,
    send_sync_patiently,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def queue_size(stack: RocketMQStack, topic: str) -> int:
    info = stack.topics.topics().get(to_storage(topic))
    if info is None:
        return 0
    total = 0
    for p in range(info.partitions):
        total += (await stack.topics.partition(info.name, p)).high_watermark
    return total


async def test_reconsume_later_goes_to_retry_then_dlq(fast_stack: RocketMQStack) -> None:
    stack = fast_stack
    await stack.broker.ensure_topic("retried", 1)

    def run() -> list[int]:
        p = producer(stack.name_server_addr, "PG_R")
        send_sync_patiently(p, message("retried", b"poison", "T", "k-poison"))
        p.shutdown()
        c = Consumer(stack.name_server_addr, "CG_R", "retried", "*", reply=lambda r: False)
        try:
            # first delivery + 2 retries through %RETRY%CG_R, then the DLQ
            assert c.wait_for(lambda got: len(got) >= 3, 40), c.received
            time.sleep(3)
            return [r.reconsume_times for r in c.received]
        finally:
            c.shutdown()

    times = await trio.to_thread.run_sync(run)
    assert times == [0, 1, 2]
    assert await queue_size(stack, "%RETRY%CG_R") == 2
    with trio.fail_after(10):
        while await queue_size(stack, "%DLQ%CG_R") < 1:  # noqa: ASYNC110
            await trio.sleep(0.1)


async def test_delay_level_arrives_no_earlier(fast_stack: RocketMQStack) -> None:
    stack = fast_stack
    await stack.broker.ensure_topic("delayed", 1)

    def run() -> tuple[float, float]:
        c = Consumer(stack.name_server_addr, "CG_D", "delayed", "*")
        try:
            time.sleep(1.0)
            p = producer(stack.name_server_addr, "PG_D")
            sent_at = time.time()  # before the first attempt: no stored copy is older
            send_sync_patiently(p, message("delayed", b"later", "T", "k", delay_level=2))
            p.shutdown()
            assert c.wait_for(lambda got: len(got) >= 1, 20), "delayed message never came"
            return sent_at, c.received[0].at
        finally:
            c.shutdown()

    sent_at, arrived_at = await trio.to_thread.run_sync(run)
    assert arrived_at - sent_at >= 2.0 - 0.05


async def test_transactions_commit_rollback_and_check_back(fast_stack: RocketMQStack) -> None:
    stack = fast_stack
    await stack.broker.ensure_topic("txn", 1)
    checked: list[str] = []
    retried: set[bytes] = set()
    decisions = {b"commit-me": TransactionStatus.COMMIT,
                 b"roll-me-back": TransactionStatus.ROLLBACK,
                 b"ask-me-later": TransactionStatus.UNKNOWN}

    def run() -> list[bytes]:
        def checker(msg):  # type: ignore[no-untyped-def]
            checked.append(msg.body.decode())  # as an application would: its local outcome
            rollback = decisions[msg.body] == TransactionStatus.ROLLBACK
            return TransactionStatus.ROLLBACK if rollback else TransactionStatus.COMMIT

        p = TransactionMQProducer("PG_T", checker)
        p.set_namesrv_addr(stack.name_server_addr)
        p.start()
        c = Consumer(stack.name_server_addr, "CG_T", "txn", "*")
        try:
            for body in decisions:  # a send the client gave up on is sent again
                send_in_transaction_patiently(p, message("txn", body, "T", "k"), body,
                                              lambda m, args: decisions[m.body], retried)
            assert c.wait_for(lambda got: len(got) >= 2, 30), c.received
            time.sleep(1.5)
            return sorted(r.body for r in c.received)
        finally:
            c.shutdown()
            p.shutdown()

    bodies = await trio.to_thread.run_sync(run)
    assert sorted(set(bodies)) == [b"ask-me-later", b"commit-me"]
    # each once, but a retried send's body (its timed-out half message may be committed too)
    assert [b for b in bodies if b not in retried] == [
        b for b in (b"ask-me-later", b"commit-me") if b not in retried]
    assert "ask-me-later" in checked
    assert set(checked) - {"ask-me-later"} <= {b.decode() for b in retried}
