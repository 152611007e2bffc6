"""A RocketMQ push consumer group resumes where it was after its node's worker count changed.

One data directory runs with 1 worker, then 2, then 1 again (SIGTERM between), RocketMQ on,
with the official C++ client: the group consumes everything sent so far and its offsets are
durable; after each change more is sent *before* the consumer starts again, and the consumer
gets exactly the new messages.  Workers keep RocketMQ offsets per bundle and a one-process node
in one ledger (gateway/rocketmq/offset_layout.py moves them at start); before, the offsets were
lost at each change and the group started over by its CONSUME_FROM setting (messages skipped,
or read again)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.cluster.kafka_workload import create_topic
from tests.integration.test_standalone_workers import serving
from tests.integration.test_standalone_workers_rocketmq import (
    PARTITIONS,
    TOPIC,
    RocketMQWorkers,
    route,
    send_all,
    wait_route,
)
from tests.rocketmq.cpp_client import Consumer, producer
from tests.rocketmq.remoting_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP = "CG_MOVED"


class Node(RocketMQWorkers):
    """The same ports and data directory with 1 or 2 workers (2 workers' ports reserved)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.config_args = self.extra_args[self.extra_args.index("--config"):]
        self.workers_now(1)

    def workers_now(self, workers: int) -> None:
        self.extra_args = ["--workers", str(workers), *self.config_args]

    def start_with(self, workers: int) -> None:
        self.workers_now(workers)
        self.start()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with serving(Node(tmp_path / "data")) as started:
        yield started


async def all_committed(ns: str, timeout_s: float = 90.0) -> None:
    """Until GROUP's committed offset of every queue of every broker in TOPIC's route is the
    queue's end (answered once durable)."""
    behind: dict[tuple[str, int], tuple[int | None, int]] = {}
    with trio.move_on_after(timeout_s):
        while True:
            behind = {}
            for address in set((await route(ns)).values()):
                client = await RawClient.connect(address)
                try:
                    for queue in range(PARTITIONS):
                        end = await client.call(RC.GET_MAX_OFFSET,
                                                {"topic": TOPIC, "queueId": queue})
                        if end.code != ResponseCode.SUCCESS:
                            break  # past this broker's queues
                        got = await client.call(RC.QUERY_CONSUMER_OFFSET, {
                            "consumerGroup": GROUP, "topic": TOPIC, "queueId": queue})
                        committed = (int(got.ext_fields["offset"])
                                     if got.code == ResponseCode.SUCCESS else None)
                        last = int(end.ext_fields["offset"])
                        if committed is None or committed < last:
                            behind[(address, queue)] = (committed, last)
                finally:
                    await client.aclose()
            if not behind:
                return
            await trio.sleep(0.5)
    raise AssertionError(f"(committed, end) behind: {behind}")


async def consume_exactly(node: Node, expected: list[str]) -> None:
    c = await trio.to_thread.run_sync(Consumer, node.name_server, GROUP, TOPIC)
    try:
        got_all = await trio.to_thread.run_sync(
            c.wait_for, lambda got: {r.body.decode() for r in got} >= set(expected), 120)
        await trio.sleep(3.0)  # anything read again would show up here
        received = Counter(r.body.decode() for r in c.received)
        assert got_all, f"missing: {sorted(set(expected) - set(received))[:10]}"
        assert set(received) == set(expected), (
            f"read again: {sorted(set(received) - set(expected))[:10]}")
        await all_committed(node.name_server)
    finally:
        await trio.to_thread.run_sync(c.shutdown)


async def send(node: Node, tag: str) -> list[str]:
    bodies = [f"{tag}-{i}" for i in range(48)]
    p = await trio.to_thread.run_sync(producer, node.name_server, f"PG_{tag}")
    try:
        acked, _ = await trio.to_thread.run_sync(send_all, p, bodies, 120.0)
    finally:
        await trio.to_thread.run_sync(p.shutdown)
    assert acked == bodies
    return bodies


async def wait_routed(node: Node, workers: int) -> None:
    """The route once every queue is served where it settles: with 2 workers, each bundle on
    the worker it stays on (a consumer starting while bundles still move between workers is
    another test's matter: test_standalone_workers_rocketmq)."""
    if workers > 1:
        await wait_route(node, set(range(workers)))
        return
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if len(await route(node.name_server)) == 1:
            return
        await trio.sleep(0.5)
    raise AssertionError("no route with 1 worker")


async def test_a_push_consumer_resumes_after_each_worker_count_change(node: Node) -> None:
    await trio.to_thread.run_sync(create_topic, node.bootstrap, TOPIC, PARTITIONS)
    await wait_routed(node, 1)
    await consume_exactly(node, await send(node, "one"))
    for workers, tag in ((2, "two"), (1, "back")):
        await trio.to_thread.run_sync(node.stop, 120)
        await trio.to_thread.run_sync(node.start_with, workers)
        await wait_routed(node, workers)
        await consume_exactly(node, await send(node, tag))
