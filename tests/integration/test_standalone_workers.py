"""`ledgerwire standalone --workers 2`: a supervisor and two broker workers, each with a bookie.

Real processes, real clients (confluent-kafka), real kills: a worker killed with SIGKILL during
acknowledged idempotent produce loses and duplicates nothing; a supervisor killed with SIGKILL
leaves no process behind and a restart serves everything; SIGTERM stops the whole node; the
node's one admin listener serves /metrics of both workers and admin calls for the node."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standalone import Standalone, free_port_range

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKERS = 2
PARTITIONS = 8
BROKER_ID = 0  # kafka.broker_id: worker i is node BROKER_ID + i


class WorkersStandalone(Standalone):
    """A standalone with --workers N on N consecutive Kafka ports."""

    def __init__(self, data_dir: Path, workers: int = WORKERS) -> None:
        # one bookie per worker (what the node has anyway): their ports are reserved
        super().__init__(data_dir, bookies=workers,
                         extra_args=["--workers", str(workers), "--no-rocketmq"])
        self.workers = workers
        self.kafka_port = free_port_range(workers)

    def _accepts(self) -> bool:
        return False  # worker 0 listens before the others: wait for the supervisor's line

    def start(self, timeout_s: float = 180.0) -> None:
        super().start(timeout_s)
        self.started_at = time.monotonic()

    def full_log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> dict[str, int]:
        """The latest pid of each child ("worker 0", ...) from their start lines."""
        found: dict[str, int] = {}
        for name, pid in re.findall(r"ledgerwire (bookies|worker \d+) started \(pid (\d+)\)",
                                    self.full_log()):
            found[name] = int(pid)
        return found

    def wait_for_restart(self, name: str, old_pid: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.children().get(name)
            if pid is not None and pid != old_pid and b"broker registered" in \
                    self.log_path.read_bytes().split(b"started (pid %d)" % pid, 1)[-1]:
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} was not restarted:\n{self.log()}")


W = TypeVar("W", bound=WorkersStandalone)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@contextmanager
def serving(server: W) -> Iterator[W]:
    """`server` started, then stopped with none of its worker processes left behind."""
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop(120)
        wait_dead(list(server.children().values()))
        for pid in server.children().values():  # never leave one behind, whatever happened
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[WorkersStandalone]:
    with serving(WorkersStandalone(tmp_path / "data")) as server:
        yield server


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(60)


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    deadline = time.monotonic() + 120
    idle_until = None
    while time.monotonic() < deadline:
        batch = consumer.consume(num_messages=5000, timeout=0.5)
        for message in batch:
            value = message.value()
            if message.error() is None and value is not None:
                values.append(value)
        if len(values) >= expected:  # then a little more: a duplicate would show up here
            idle_until = idle_until or time.monotonic() + 2.0
            if time.monotonic() > idle_until:
                break
    consumer.close()
    return values


def leader_worker(node: WorkersStandalone, topic: str) -> str:
    """The worker ("worker i") that leads partition 0 of topic: the one whose kill matters."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # -1 while its bundle moves between workers
        metadata = admin.list_topics(topic, timeout=30)
        leader = metadata.topics[topic].partitions[0].leader
        if leader in metadata.brokers:
            return f"worker {metadata.brokers[leader].port - node.kafka_port}"
        time.sleep(0.2)
    raise AssertionError(f"partition 0 of {topic} has no leader")


def admin_call(node: WorkersStandalone, method: str, path: str,
               body: dict[str, object] | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of one call to the node's admin listener."""
    request = urllib.request.Request(f"http://127.0.0.1:{node.admin_port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def check_node_admin(node: WorkersStandalone) -> None:
    """The node's one admin listener answers for both workers: /metrics carries every
    worker's samples (labelled) and counts the 2000 records produced to "spread" over both;
    admin calls (a write and reads) are served for the whole node."""
    status, content_type, body = admin_call(node, "GET", "/metrics")
    assert status == 200 and content_type.startswith("text/plain"), (status, body[:300])
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    started = families["ledgerwire_start_time_seconds"].samples
    assert sorted(s.labels["worker"] for s in started) == ["0", "1"]
    assert families["ledgerwire_node_workers_scraped"].samples[0].value == WORKERS
    produced = [s for s in families["ledgerwire_topic_produce_messages"].samples
                if s.name.endswith("_total") and s.labels["topic"] == "spread"]
    assert sum(s.value for s in produced) == 2000, produced
    status, _, body = admin_call(node, "PUT", "/admin/v1/topics/made-by-admin",
                                 {"partitions": 3})
    assert status == 201, body
    metadata = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=30)
    assert len(metadata.topics["made-by-admin"].partitions) == 3
    status, _, body = admin_call(node, "GET", "/admin/v1/topics")
    assert status == 200 and b'"made-by-admin"' in body and b'"spread"' in body, body[:500]
    status, _, _ = admin_call(node, "GET", "/admin/v1/topics/no-such-topic")
    assert status == 404
    status, _, body = admin_call(node, "GET", "/ready")  # the node's: every worker ready
    assert (status, json.loads(body)) == (200, {"ready": True, "workers": {
        str(i): "ready" for i in range(WORKERS)}})


def check_ledgers_on_owners_bookies(node: WorkersStandalone, topic: str) -> None:
    """A partition's current ledger is on its owner's own bookie (worker i serves bookie i),
    so its adds never leave the owner's process.  The node's admin forwards a describe to
    worker 0, which lists the ledgers of the partitions it owns: asked until it owns one
    (its share arrives once the start-up hand-backs are done)."""
    deadline = time.monotonic() + 90
    while True:
        status, _, body = admin_call(node, "GET", f"/admin/v1/topics/{topic}")
        # 400 NOT_LEADER_OR_FOLLOWER: a partition moved while it was described; ask again
        owned = [p for p in json.loads(body)["partitions"] if p["ledgers"]] \
            if status == 200 else []
        if owned or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert owned, (status, body[:800])
    for p in owned:
        assert p["ledgers"][-1]["ensemble"] == [
            f"127.0.0.1:{node.bookie_port + p['owner'] - BROKER_ID}"], owned


def test_two_workers_are_two_brokers_that_serve_produce_and_group_consume(
        node: WorkersStandalone) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    expected = [node.kafka_port + i for i in range(WORKERS)]
    deadline = time.monotonic() + 60  # a worker may answer before it saw the other register
    while (ports := sorted(b.port for b in admin.list_topics(timeout=30).brokers.values())) \
            != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ports == expected
    create_topic(node.bootstrap, "spread")
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    for i in range(2000):
        producer.produce("spread", b"v-%05d" % i, key=b"%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["spread"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(seen) < 2000 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        value = None if message is None or message.error() is not None else message.value()
        if value is not None:
            seen.add(value)
    consumer.close()
    assert len(seen) == 2000
    check_node_admin(node)
    children = list(node.children().values())
    assert len(children) == WORKERS
    time.sleep(max(0.0, 15.0 - (time.monotonic() - node.started_at)))  # outlive idle threads
    check_ledgers_on_owners_bookies(node, "spread")
    assert "exited (" not in node.full_log(), "a child died on its own"
    assert node.stop(120) == 0  # SIGTERM: workers hand off, close, stop their bookies; then store
    assert wait_dead(children) == []


def test_kill_9_of_a_worker_during_idempotent_produce_loses_and_duplicates_nothing(
        node: WorkersStandalone) -> None:
    create_topic(node.bootstrap, "idem")
    acked: list[bytes] = []
    errors: list[object] = []
    total = 6000
    half_sent = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True,
                             "linger.ms": 2, "message.timeout.ms": 150000})

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]
            else:
                errors.append(err)

        for i in range(total):
            while True:
                try:
                    producer.produce("idem", b"m-%06d" % i, key=b"%d" % i,
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 200 == 0:
                producer.poll(0.02)
            if i == total // 2:
                half_sent.set()
        producer.flush(160)

    thread = threading.Thread(target=produce)
    thread.start()
    assert half_sent.wait(120)
    name = leader_worker(node, "idem")
    victim = node.children()[name]
    os.kill(victim, signal.SIGKILL)  # mid-stream, with produce requests in flight
    thread.join(200)
    assert not thread.is_alive()
    assert errors == []
    assert len(acked) == total
    node.wait_for_restart(name, victim)  # the supervisor brought it back
    assert node.full_log().count("exited (") == 1, "only the victim may have died"

    stored = read_all(node.bootstrap, "idem", total)
    counts = Counter(stored)
    duplicated = [v for v, n in counts.items() if n > 1]
    missing = set(acked) - set(counts)
    assert duplicated == [], f"{len(duplicated)} duplicated, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"


def test_kill_9_of_the_supervisor_leaves_no_orphans_and_a_restart_recovers(
        node: WorkersStandalone) -> None:
    create_topic(node.bootstrap, "kept")
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    for i in range(1000):
        producer.produce("kept", b"k-%05d" % i, key=b"%d" % i)
    assert producer.flush(60) == 0
    children = list(node.children().values())
    assert len(children) == WORKERS
    node.kill()  # SIGKILL the supervisor only
    assert wait_dead(children) == [], "children outlived their supervisor"
    node.start()
    values = read_all(node.bootstrap, "kept", 1000)
    assert sorted(values) == sorted(b"k-%05d" % i for i in range(1000))
