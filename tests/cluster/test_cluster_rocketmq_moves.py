"""RocketMQ clients follow a bundle that moved between live brokers at once: the old owner
forwards per-queue requests to the new one (gateway/rocketmq/forwarding.py), so a client whose
route still names the old address (the C++ client refreshes routes every 30 s) keeps every
queue.  Real cluster (ZooKeeper, 3 bookies, 2 brokers, 4 bundles), the official C++ client
with an orderly producer (it cannot route around a queue: before forwarding, each of its sends
to a moved queue failed until the route refresh) across `ledgerwire admin drain`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import create_topic, read_topic
from tests.cluster.test_cluster_rocketmq import BUNDLES, PARTITIONS, TOPIC, wait_route
from tests.rocketmq.cpp_client import SendStatus, message, producer
from tests.rocketmq.remoting_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", bookies=3, brokers=2, bundles=BUNDLES,
                 rocketmq=True) as c:
        yield c


class OrderlySends:
    """An orderly C++ producer sending keys k0..k15 round and round until stopped."""

    def __init__(self, ns: str) -> None:
        self.p = producer(ns, "PG_MOVES", orderly=True)
        self.acked: list[tuple[float, str]] = []
        self.failed: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"m-{i}"
            try:
                result = self.p.send_orderly_with_sharding_key(
                    message(TOPIC, body.encode(), "T", body), f"k{i % 16}")
                ok = result.status == SendStatus.OK
            except Exception as exc:  # counted: the test wants none
                ok, body = False, f"{body}: {exc}"
            (self.acked if ok else self.failed).append((time.monotonic(), body))
            i += 1
            time.sleep(0.01)

    def wait_acked(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            assert time.monotonic() < deadline, (len(self.acked), self.failed[:5])
            time.sleep(0.1)

    def __enter__(self) -> OrderlySends:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self.p.shutdown()


async def test_orderly_sends_follow_a_drained_broker_without_a_failure(cluster: Cluster) -> None:
    await trio.to_thread.run_sync(create_topic, cluster.bootstrap, TOPIC, PARTITIONS)
    owners = await trio.to_thread.run_sync(cluster.wait_all_bundles_owned)
    assert set(owners.values()) == {1, 2}
    await wait_route(cluster, owners)
    moved = sorted(b for b, o in owners.items() if o == 2)

    sends = await trio.to_thread.run_sync(OrderlySends, cluster.name_server(1))
    with sends:
        await trio.to_thread.run_sync(sends.wait_acked, 50)
        drain_at = time.monotonic()
        drain = await trio.to_thread.run_sync(
            lambda: cluster.cli("admin", "drain", "2", "--wait", "60"))
        assert drain.returncode == 0, drain.stdout + drain.stderr
        await trio.to_thread.run_sync(
            lambda: cluster.wait_all_bundles_owned(by={1}, timeout_s=60))
        drained_at = time.monotonic()
        # the old address still serves a moved queue: broker 2 forwards to broker 1
        old = await RawClient.connect(f"127.0.0.1:{cluster.rocketmq_base_ports[2] + moved[0]}")
        try:
            answer = await old.call(RC.SEND_MESSAGE, {
                "producerGroup": "PG_RAW", "topic": TOPIC, "queueId": 0, "sysFlag": 0,
                "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": ""},
                b"raw-after-drain", wait_s=15)
        finally:
            await old.aclose()
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        await trio.sleep(3.0)  # sends go on through the stale route
        acked_after = [b for t, b in sends.acked if t > drained_at]
    assert not sends.failed, (sends.failed[:5], cluster.logs())
    gaps = [b[0] - a[0] for a, b in zip(sends.acked, sends.acked[1:], strict=False)
            if b[0] > drain_at]
    records = await trio.to_thread.run_sync(read_topic, cluster.bootstrap, TOPIC, PARTITIONS)
    stored = {v: part for part, _, v in records}
    assert "raw-after-drain" in stored
    assert {stored[b] for b in acked_after} == set(range(PARTITIONS))  # every queue, moved too
    print(f"drain took {drained_at - drain_at:.1f} s; longest gap between acknowledged "
          f"orderly sends {max(gaps):.2f} s; {len(acked_after)} acked after it, 0 failed")
