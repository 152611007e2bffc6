"""RocketMQ on `ledgerwire standalone --workers 2`: each worker serves its bundles' queues as
cluster brokers do, and the node's one name server port is answered by both workers.

The official C++ client (rocketmq-client-python) sends through the node's name server to a
topic whose 16 queues (one per bundle) are owned by both workers — every message acknowledged
once, stored once (read back over Kafka) and received once by a push consumer group; then
worker 1 is killed with SIGKILL, its bundles move to worker 0 and the same producer keeps
sending: nothing acknowledged is lost."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.cluster.kafka_workload import create_topic, read_topic
from tests.integration.test_standalone_workers import WorkersStandalone, serving
from tests.rocketmq.cpp_client import Consumer, SendStatus, message, producer
from tests.rocketmq.offsets import wait_committed
from tests.rocketmq.remoting_client import RawClient
from tests.support.standalone import free_port_range

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "rmq_spread"
BUNDLES = 16  # supervisor.cluster_layout for two workers
PARTITIONS = 16  # one queue in each bundle
GROUP = "CG_WORKERS"


class RocketMQWorkers(WorkersStandalone):
    """Two workers with RocketMQ: bundle ports base + 16 i + b, gRPC likewise."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.rocketmq_broker_port = free_port_range(BUNDLES * self.workers)
        self.rocketmq_grpc_port = free_port_range(BUNDLES * self.workers)
        config = data_dir.parent / "workers.toml"
        config.write_text("[cluster]\nhandback_delay_s = 0\n")  # worker 1 gets its share now
        self.extra_args = ["--workers", str(self.workers), "--config", str(config)]

    @property
    def name_server(self) -> str:
        return f"127.0.0.1:{self.name_server_port}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RocketMQWorkers]:
    with serving(RocketMQWorkers(tmp_path / "data")) as server:
        yield server


async def route(ns: str) -> dict[str, str]:
    """brokerName -> address of TOPIC's route from the name server at `ns`."""
    client = await RawClient.connect(ns)
    try:
        r = await client.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    finally:
        await client.aclose()
    if r.code != ResponseCode.SUCCESS:
        return {}
    doc: dict[str, Any] = json.loads(r.body)
    addrs = {d["brokerName"]: d["brokerAddrs"]["0"] for d in doc["brokerDatas"]}
    return {q["brokerName"]: addrs[q["brokerName"]] for q in doc["queueDatas"]}


def worker_of(node: RocketMQWorkers, address: str) -> int:
    return (int(address.rsplit(":", 1)[1]) - node.rocketmq_broker_port) // BUNDLES


async def wait_route(node: RocketMQWorkers, workers: set[int],
                     timeout_s: float = 90.0) -> dict[str, str]:
    """The route once every bundle has a queue and its owners are exactly `workers` (asked on
    fresh connections, so the kernel hands them to either worker's name server)."""
    seen: dict[str, str] = {}
    with trio.move_on_after(timeout_s):
        while True:
            seen = await route(node.name_server)
            if len(seen) == BUNDLES and {worker_of(node, a) for a in seen.values()} == workers:
                for b in range(BUNDLES):  # bundle b at its owner's base + b
                    address = seen[f"DefaultCluster-b{b}"]
                    assert int(address.rsplit(":", 1)[1]) % BUNDLES == \
                        (node.rocketmq_broker_port + b) % BUNDLES, seen
                return seen
            await trio.sleep(0.5)
    raise AssertionError(f"route {seen} never spread over workers {workers}")


def send_all(p: Any, bodies: list[str], deadline_s: float) -> tuple[list[str], set[str]]:
    """Send each body until acknowledged (a send to a killed worker fails: the client retries
    elsewhere and so do we); (acknowledged, those that needed more than one attempt)."""
    acked, retried = [], set()
    deadline = time.monotonic() + deadline_s
    for body in bodies:
        while True:
            try:
                if p.send_sync(message(TOPIC, body.encode(), "T", body)).status == SendStatus.OK:
                    acked.append(body)
                    break
            except Exception:  # noqa: BLE001 - a stale route to the killed worker
                pass
            retried.add(body)  # a failed attempt may still have been stored (at-least-once)
            assert time.monotonic() < deadline, f"{body} never acknowledged"
            time.sleep(0.2)
    return acked, retried


def assert_stored_once(stored: list[str], sent: list[str], retried: set[str],
                       client_resends: int = 0) -> None:
    """Every acknowledged body stored; twice only if one of our attempts failed, or (at most
    `client_resends` of them) because the C++ client resent a send whose answer it stopped
    waiting for: RocketMQ 4.x sends are at least once and its resend carries a new message
    id, so no broker can tell it from a new message."""
    counts = Counter(stored)
    assert set(counts) == set(sent), sorted(set(counts) ^ set(sent))
    unexplained = {body: n for body, n in counts.items() if n > 1 and body not in retried}
    assert len(unexplained) <= client_resends, unexplained


async def consume(ns: str, expected: set[str],
                  committed_at: dict[str, str] | None = None) -> list[str]:
    """What a push consumer of GROUP receives once it has `expected`; with `committed_at`, it
    runs until its offsets are durable there (its last commit, at shutdown, is oneway: a worker
    killed before storing it hands those messages out again, as at-least-once allows)."""
    c = await trio.to_thread.run_sync(Consumer, ns, GROUP, TOPIC)
    try:
        assert await trio.to_thread.run_sync(
            c.wait_for, lambda got: {r.body.decode() for r in got} >= expected, 120), \
            len(c.received)
        await trio.sleep(2.0)  # a duplicate would show up here
        if committed_at is not None:
            await wait_committed(committed_at, GROUP, TOPIC)
        return [r.body.decode() for r in c.received]
    finally:
        await trio.to_thread.run_sync(c.shutdown)


async def test_cpp_client_sends_and_consumes_across_two_workers(node: RocketMQWorkers) -> None:
    await trio.to_thread.run_sync(create_topic, node.bootstrap, TOPIC, PARTITIONS)
    routed = await wait_route(node, {0, 1})
    p = await trio.to_thread.run_sync(producer, node.name_server, "PG_WORKERS")
    try:
        first = [f"first-{i}" for i in range(160)]
        acked, retried = await trio.to_thread.run_sync(send_all, p, first, 120.0)
        assert acked == first
        got = await consume(node.name_server, set(first), committed_at=routed)
        # every message received, once if sent once; one CI run (session 13, 2 of 3 xdist
        # workers busy) received one early body twice with no failed attempt of ours: the C++
        # client resending a send it stopped waiting for, or its push consumer pulling a queue
        # again from before its first commit, both at-least-once; not reproduced in 4 runs
        assert_stored_once(got, first, retried, client_resends=1)

        node_children = node.children()
        os.kill(node_children["worker 1"], signal.SIGKILL)
        second = [f"second-{i}" for i in range(80)]
        acked, retried_second = await trio.to_thread.run_sync(send_all, p, second, 180.0)
        assert acked == second
        retried |= retried_second
    finally:
        await trio.to_thread.run_sync(p.shutdown)
    records = await trio.to_thread.run_sync(read_topic, node.bootstrap, TOPIC, PARTITIONS)
    # after the kill a send may wait for the dead worker's bundles to be taken over; on a
    # loaded machine the client's 10 s may run out first (once in a CI run at load 15)
    assert_stored_once([v for _, _, v in records], first + second, retried, client_resends=3)
    got = await consume(node.name_server, set(second))
    assert_stored_once(got, second, retried, client_resends=3)  # both workers' offsets kept
