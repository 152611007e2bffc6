"""RocketMQ 5 (gRPC) on a real cluster (ZooKeeper, 3 bookies, 2 `ledgerwire broker` processes,
4 bundles) with the real rocketmq-python-client 5.1.2: QueryRoute on either broker names each
bundle's queue at its owner's gRPC port; a producer started against broker 1 reaches the queues
of both; a SimpleConsumer leaves half of what it received unacknowledged; after SIGKILL of
broker 2 the same producer goes on (each send retried until acknowledged, as an application
does), and a consumer of the same group gets every acknowledged send that it had not
acknowledged, the in-flight ones again once their invisible duration ends, and none of those it
had acknowledged before the kill.  Broker 1 adopts broker 2's gRPC ports (as it does its 4.x
ports), so a send on them, as from a client whose route still names broker 2, is stored."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import create_topic
from tests.rocketmq5.support import PYTHON, SCRIPT, RawClient, run5

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "rmq5_orders"
BUNDLES = 4
CLUSTER_NAME = "DefaultCluster"
GROUP = "CG5_CLUSTER"
COUNT = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", bookies=3, brokers=2, bundles=BUNDLES,
                 rocketmq=True) as c:
        yield c


def grpc_route(endpoint: str) -> set[tuple[str, int, int]]:
    """(broker name, gRPC port, queue id) of every queue QueryRoute names."""
    with RawClient(endpoint) as client:
        answer = client.route(TOPIC)
    assert answer.status.code == 20000, answer.status  # OK
    return {(q.broker.name, q.broker.endpoints.addresses[0].port, q.id)
            for q in answer.message_queues}


def wait_grpc_routes(cluster: Cluster, owners: dict[int, int],
                     timeout_s: float = 90.0) -> set[tuple[str, int, int]]:
    """The route every live broker's gRPC endpoint gives, once it matches bundle `owners`
    (one queue per bundle: 4 partitions over 4 bundles)."""
    want = {(f"{CLUSTER_NAME}-b{b}", cluster.grpc_base_ports[o] + b, 0)
            for b, o in owners.items()}
    seen: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = [grpc_route(cluster.grpc_endpoint(i, b)) for i in sorted(cluster.brokers)
                if cluster.brokers[i].alive for b in (0, BUNDLES - 1)]
        if all(s == want for s in seen):
            return want
        time.sleep(0.5)
    raise AssertionError(f"gRPC routes {seen} never became {want}")


def read_until(proc: subprocess.Popen[str], key: str, value: str,
               lines: list[dict[str, Any]], timeout_s: float) -> None:
    """Collect the client's JSON lines until one has `key` == `value`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            doc = json.loads(line)
            lines.append(doc)
            if doc.get(key) == value:
                return
    raise AssertionError(f"no {key}={value} from the producer: {lines[-5:]}\n"
                         f"{proc.stderr.read() if proc.stderr else ''}")


def send_on_gone_ports(cluster: Cluster, bundles: list[int]) -> set[str]:
    """Send one message on broker 2's gRPC port of each of `bundles` (a stale route); the
    bodies sent.  The port is adopted once broker 1 saw broker 2's session end, which it has
    by the time it owns every bundle; a refused connect is retried for a while all the same, and
so is a "not served here" while the bundle still loads."""
    import grpc

    from protocols.rocketmq.grpc.v2 import definition_pb2 as pb

    bodies = set()
    for bundle in bundles:
        deadline = time.monotonic() + 30
        while True:
            try:
                with RawClient(cluster.grpc_endpoint(2, bundle)) as client:
                    answer = client.send(TOPIC, f"adopted-{bundle}".encode(),
                                         f"ADOPTED{bundle:04d}")
            except grpc.RpcError as exc:  # UNAVAILABLE: the connect was refused
                assert time.monotonic() < deadline, f"bundle {bundle}'s gone port: {exc!r}"
                time.sleep(0.5)
                continue
            if answer.status.code == pb.OK or time.monotonic() > deadline:
                break
            # "not served here" (a code the 5.x producer retries): the bundle took longer to
            # load than the owner holds a call for it; a client tries again, and so does this
            assert "not served" in answer.status.message, answer
            time.sleep(0.5)
        assert answer.status.code == pb.OK, answer
        bodies.add(f"adopted-{bundle}")
    return bodies


async def test_python_client_across_bundles_and_broker_sigkill(cluster: Cluster) -> None:
    await trio.to_thread.run_sync(create_topic, cluster.bootstrap, TOPIC, BUNDLES)
    owners = await trio.to_thread.run_sync(cluster.wait_all_bundles_owned)
    assert set(owners.values()) == {1, 2}
    await trio.to_thread.run_sync(wait_grpc_routes, cluster, owners)

    producer = subprocess.Popen(  # noqa: ASYNC220 - a long-lived client, read from a thread
        [str(PYTHON), str(SCRIPT), "produce-phases", "--endpoint", cluster.grpc_endpoint(1),
         "--topic", TOPIC, "--count", str(COUNT), "--max-seconds", "120"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd="/tmp")
    lines: list[dict[str, Any]] = []
    try:
        await trio.to_thread.run_sync(read_until, producer, "phase", "before", lines, 120.0)
        before = [d["sent"] for d in lines if "sent" in d]
        assert sorted(before) == sorted(f"m-before-{i}" for i in range(COUNT))

        # the same group receives all of them and acknowledges the even ones only
        first = await trio.to_thread.run_sync(lambda: run5(
            "receive-tolerant", cluster.grpc_endpoint(1), TOPIC, "--consumer-group", GROUP,
            "--expect", str(COUNT), "--ack-even", "--invisible-s", "10",
            "--max-seconds", "60", timeout_s=120))
        got_first = {d["body"] for d in first if "body" in d}
        assert got_first == set(before)
        acked_first = {d["body"] for d in first if d.get("acked")}
        in_flight = set(before) - acked_first
        assert in_flight, first

        moved = sorted(b for b, o in owners.items() if o == 2)
        killed_at = time.monotonic()
        cluster.brokers[2].kill()
        owners = await trio.to_thread.run_sync(
            lambda: cluster.wait_all_bundles_owned(by={1}, timeout_s=60))
        await trio.to_thread.run_sync(wait_grpc_routes, cluster, owners)
        moved_s = time.monotonic() - killed_at
        # a client whose route still names broker 2 reaches its gRPC ports: broker 1 adopted
        # them (gateway/rocketmq/adoption.py); without adoption the connect is refused
        adopted = await trio.to_thread.run_sync(send_on_gone_ports, cluster, moved)

        assert producer.stdin is not None
        producer.stdin.write("go\n")
        producer.stdin.flush()
        await trio.to_thread.run_sync(read_until, producer, "phase", "after", lines, 150.0)
        after = [d["sent"] for d in lines if "sent" in d and "-after-" in d["sent"]]
        assert sorted(after) == sorted(f"m-after-{i}" for i in range(COUNT))
        failures = sum(1 for d in lines if "failed" in d)
    finally:
        producer.kill()
        producer.communicate()

    wanted = in_flight | set(after) | adopted
    second = await trio.to_thread.run_sync(lambda: run5(
        "receive-tolerant", cluster.grpc_endpoint(1), TOPIC, "--consumer-group", GROUP,
        "--expect", str(len(wanted)), "--linger-s", "3", "--max-seconds", "90",
        timeout_s=150))
    got_second = {d["body"] for d in second if "body" in d}
    assert got_second >= wanted, (sorted(wanted - got_second), cluster.logs())  # none lost
    assert not got_second & acked_first, sorted(got_second & acked_first)  # acks were durable
    print(f"bundles moved and gRPC routes agreed {moved_s:.1f} s after the kill; sends that "
          f"failed (and were retried) after it: {failures}; redelivered in-flight: "
          f"{len(in_flight)}")


HELD_INVISIBLE_S = 30


async def test_forwarding_across_a_drain_and_recall_at_the_access_point(
        cluster: Cluster) -> None:
    """A bundle moving between live brokers (`ledgerwire admin drain`): the old owner forwards
    what still reaches it to the new owner, where a receipt it handed out is still good (the
    delivery state moved with the bundle) and the unacknowledged rest comes back after its
    invisible duration; RecallMessage, which the client sends to its access point, is forwarded
    to whichever broker owns the message's bundle; so is ChangeInvisibleDuration."""
    from protocols.rocketmq.grpc.v2 import definition_pb2 as pb

    await trio.to_thread.run_sync(create_topic, cluster.bootstrap, TOPIC, BUNDLES)
    owners = await trio.to_thread.run_sync(cluster.wait_all_bundles_owned)
    await trio.to_thread.run_sync(wait_grpc_routes, cluster, owners)
    moved = sorted(b for b, o in owners.items() if o == 2)
    old_port = cluster.grpc_endpoint(2, moved[0])
    group = "CG5_DRAIN"

    # timed messages on every queue of a topic over both brokers, the even ones recalled
    # through broker 1 (their bundles' owners: half of them broker 2)
    out = await trio.to_thread.run_sync(lambda: run5(
        "recall", cluster.grpc_endpoint(1), "rmq5_recall", "--count", "16", "--delay-ms",
        "10000", "--prefix", "rc", timeout_s=120))  # each send and its recall within 10 s
    assert len([line for line in out if "recalled" in line]) == 8, out
    kept = await trio.to_thread.run_sync(lambda: run5(
        "receive-tolerant", cluster.grpc_endpoint(1), "rmq5_recall", "--consumer-group",
        "CG5_RECALL", "--expect", "8", "--linger-s", "3", "--max-seconds", "60",
        timeout_s=120))
    assert sorted(d["body"] for d in kept if "body" in d) == sorted(
        f"rc-{i}" for i in range(1, 16, 2))

    def before_drain() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        with RawClient(old_port) as client:
            for i in range(6):  # queue 0 of the moved bundle
                assert client.send(TOPIC, b"d%d" % i, f"DRAIN{i:04d}").status.code == pb.OK
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 6 and time.monotonic() < deadline:
                # invisible long enough to outlast a drain on a loaded machine
                got += client.receive(TOPIC, group, batch=6, invisible_s=HELD_INVISIBLE_S)[1]
            handles = [(m.system_properties.message_id, m.system_properties.receipt_handle)
                       for m in got]
            assert len(handles) == 6
            assert client.ack(TOPIC, group, handles[:3]).status.code == pb.OK
            return handles[:3], handles[3:]

    acked, held = await trio.to_thread.run_sync(before_drain)
    drain = await trio.to_thread.run_sync(lambda: cluster.cli("admin", "drain", "2", "--wait",
                                                              "60"))
    assert drain.returncode == 0, drain.stdout + drain.stderr
    owners = await trio.to_thread.run_sync(
        lambda: cluster.wait_all_bundles_owned(by={1}, timeout_s=60))
    await trio.to_thread.run_sync(wait_grpc_routes, cluster, owners)

    def after_drain() -> tuple[Any, list[Any], Any]:
        with RawClient(old_port) as client:  # a client with a stale route
            # the two still held become visible again at once instead of at their 30 s
            return (client.ack(TOPIC, group, held[:1]),
                    [client.change_invisible(TOPIC, group, m, h, 0.5) for m, h in held[1:]],
                    client.send(TOPIC, b"late", "DRAINLATE"))

    forwarded_ack, changed, forwarded_send = await trio.to_thread.run_sync(after_drain)
    assert forwarded_ack.status.code == pb.OK, forwarded_ack  # the new owner's receipt too
    assert all(c.status.code == pb.OK for c in changed), changed
    assert forwarded_send.status.code == pb.OK, forwarded_send

    back = await trio.to_thread.run_sync(lambda: run5(
        "receive-tolerant", cluster.grpc_endpoint(1), TOPIC, "--consumer-group", group,
        "--expect", "3", "--linger-s", "3", "--max-seconds", "60", timeout_s=120))
    got = [d for d in back if "body" in d]
    # the two still held come back (attempt 2) with the late send; none acknowledged before
    assert sorted((d["message_id"], d["attempt"]) for d in got) == sorted(
        [(m, 2) for m, _ in held[1:]] + [("DRAINLATE", 1)]), back
