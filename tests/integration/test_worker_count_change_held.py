"""RocketMQ messages the broker holds survive a worker count change: a delayed message still
due and a transactional half message still undecided when a node stops with 1 worker (or 2)
are delivered once after it restarts with 2 (or 1): the delayed one not before its time, the
half message once its producer group, checked back, commits it.

A one-process node keeps them in the schedule and half topics' partitions as one broker's
queues; workers keep them per bundle (partition p in bundle p mod B); the shapes read them
differently, so gateway/rocketmq/held_layout.py moves what is pending at start.  Official C++
client, real processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from gateway.rocketmq.held_layout import HELD_LAYOUT_PATH
from ledger_backend.metadata import open_store
from tests.cluster.kafka_workload import create_topic
from tests.integration.test_standalone_workers import serving
from tests.integration.test_standalone_workers_rocketmq import PARTITIONS, TOPIC
from tests.integration.test_worker_count_change_rocketmq import Node, wait_routed
from tests.rocketmq.cpp_client import (
    Consumer,
    TransactionMQProducer,
    TransactionStatus,
    message,
    producer,
    send_in_transaction_patiently,
    send_sync_patiently,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DELAY_LEVEL = 4  # 30 s by default: still due after the restart
DELAY_S = 30.0


class HeldNode(Node):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        config = Path(self.config_args[1])
        config.write_text("[cluster]\nhandback_delay_s = 0\n"
                          "[rocketmq]\ntransaction_check_timeout_s = 2.0\n"
                          "transaction_check_interval_s = 2.0\n"
                          # never rolled back for want of a producer, however slow the restart
                          "transaction_max_checks = 100000\n")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[HeldNode]:
    with serving(HeldNode(tmp_path / "data")) as started:
        yield started


def hold(ns: str) -> float:
    """Send one delayed message and leave one half message undecided; when the delayed one
    was sent."""
    p = producer(ns, "PG_DELAYED")
    try:
        sent_at = time.time()
        send_sync_patiently(p, message(TOPIC, b"delayed", delay_level=DELAY_LEVEL))
    finally:
        p.shutdown()
    t = TransactionMQProducer("PG_HELD", lambda m: TransactionStatus.UNKNOWN)
    t.set_namesrv_addr(ns)
    t.start()
    try:
        send_in_transaction_patiently(t, message(TOPIC, b"half"), b"half",
                                      lambda m, args: TransactionStatus.UNKNOWN, set())
    finally:
        t.shutdown()
    return sent_at


def deliver(ns: str, sent_at: float) -> list[tuple[bytes, float]]:
    checked: list[bytes] = []

    def checker(m):  # type: ignore[no-untyped-def]
        checked.append(m.body)
        return TransactionStatus.COMMIT

    t = TransactionMQProducer("PG_HELD", checker)
    t.set_namesrv_addr(ns)
    t.start()
    c = Consumer(ns, "CG_HELD", TOPIC)
    try:
        got = c.wait_for(lambda r: {m.body for m in r} >= {b"delayed", b"half"},
                         max(90.0, sent_at + DELAY_S + 60 - time.time()))
        time.sleep(3.0)  # a second delivery would show here
        received = [(m.body, m.at) for m in c.received]
        assert got, f"received {received}, checked back {checked}"
        return received
    finally:
        c.shutdown()
        t.shutdown()


@pytest.mark.parametrize("first, then", [(1, 2), (2, 1)])
async def test_held_messages_survive_a_worker_count_change(node: HeldNode, first: int,
                                                           then: int) -> None:
    if first != 1:
        await trio.to_thread.run_sync(node.stop, 120)
        await trio.to_thread.run_sync(node.start_with, first)
    await trio.to_thread.run_sync(create_topic, node.bootstrap, TOPIC, PARTITIONS)
    await wait_routed(node, first)
    sent_at = await trio.to_thread.run_sync(hold, node.name_server)
    log_before = len(node.full_log())
    await trio.to_thread.run_sync(node.stop, 120)
    await trio.to_thread.run_sync(node.start_with, then)
    await wait_routed(node, then)
    received = await trio.to_thread.run_sync(deliver, node.name_server, sent_at)
    assert sorted(body for body, _ in received) == [b"delayed", b"half"]
    delayed_at = next(at for body, at in received if body == b"delayed")
    assert delayed_at - sent_at >= DELAY_S - 0.05, "delivered before its time"
    after = node.full_log()[log_before:]
    assert after.count("Traceback") == 0, after[after.find("Traceback") - 2000:][:6000]


def fresh_delayed(ns: str) -> None:
    p = producer(ns, "PG_FRESH")
    c = Consumer(ns, "CG_FRESH", TOPIC)
    try:
        send_sync_patiently(p, message(TOPIC, b"fresh", delay_level=1))
        assert c.wait_for(lambda r: b"fresh" in {m.body for m in r}, 90), c.received
    finally:
        c.shutdown()
        p.shutdown()


async def test_workers_on_held_topics_an_older_version_left_do_not_fail_in_a_loop(
        node: HeldNode) -> None:
    """A directory an older version moved to workers without moving what was held (recorded
    here as moved): the workers grow the one-process node's schedule and transaction topics
    to a queue per bundle, delay and transact again, and log no traceback (before: every
    bundle's transaction service failed each second on 'queue nums:[0]', and workers that
    grew the schedule topic from a stale count on 'the new count must be higher')."""
    await trio.to_thread.run_sync(create_topic, node.bootstrap, TOPIC, PARTITIONS)
    await wait_routed(node, 1)
    await trio.to_thread.run_sync(hold, node.name_server)
    await trio.to_thread.run_sync(node.stop, 120)
    store = await open_store(f"embedded:{node.data_dir / 'metadata'}")
    try:
        _, stat = await store.get(HELD_LAYOUT_PATH)
        await store.set(HELD_LAYOUT_PATH, b"16", stat.version)
    finally:
        await store.close()
    log_before = len(node.full_log())
    await trio.to_thread.run_sync(node.start_with, 2)
    await wait_routed(node, 2)
    await trio.to_thread.run_sync(fresh_delayed, node.name_server)
    await trio.sleep(5.0)  # the transaction services scan every second
    after = node.full_log()[log_before:]
    assert after.count("Traceback") == 0, after[after.find("Traceback") - 2000:][:6000]
    assert "grew RMQ_SYS_TRANS_OP_HALF_TOPIC from 1 to 16 partitions" in after
