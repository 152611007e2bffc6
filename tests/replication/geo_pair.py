"""Two standalones, "east" and "west", replicating a namespace both ways (for the geo tests).

Everything goes through what a user has: `ledgerwire admin` against each process, and
confluent-kafka clients on their Kafka ports.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, cast

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.standalone import Standalone

TOPIC = "geo.ns.orders"
PARTITIONS = 2


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    @property
    def origin(self) -> str | None:
        return next((v.decode() for k, v in self.headers if k == "lw.origin"), None)

    @property
    def user_headers(self) -> tuple[tuple[str, bytes], ...]:
        return tuple(h for h in self.headers if not h[0].startswith("lw.origin"))


def _start(base: Path, name: str, extra_args: tuple[str, ...] = (),
           source: Path | None = None) -> Standalone:
    """A fresh standalone; new ports when another process took one between choosing and
    binding (the machine is shared)."""
    for attempt in range(3):
        server = Standalone(base / f"{name}{attempt or ''}",
                            extra_args=["--cluster-name", name, *extra_args], source=source)
        try:
            server.start()
            return server
        except RuntimeError as exc:
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def start_pair(base: Path, *, forward_min_bytes: int | None = None,
               source: Path | None = None) -> tuple[Standalone, Standalone]:
    """East and west replicating geo/ns both ways (`forward_min_bytes`: both sides' setting,
    e.g. 0 to forward every stored batch whole that can go alone; `source`: run both from
    another checkout, as benchmarks compare a change with its parent)."""
    extra: tuple[str, ...] = ()
    if forward_min_bytes is not None:
        config = base / "replication.toml"
        config.write_text(f"[replication]\nforward_min_bytes = {forward_min_bytes}\n")
        extra = ("--config", str(config))
    east = _start(base, "east", extra, source)
    try:
        west = _start(base, "west", extra, source)
    except BaseException:
        east.stop()
        raise
    for here, there, name in ((east, west, "west"), (west, east, "east")):
        here.admin("clusters", "add", name, "--kafka", there.bootstrap)
        here.admin("tenants", "create", "geo")
        here.admin("namespaces", "create", "geo/ns", "--policy", "replication_clusters=east,west")
    east.admin("topics", "create", TOPIC, "--partitions", str(PARTITIONS))
    wait_for(lambda: TOPIC in AdminClient({"bootstrap.servers": west.bootstrap}).list_topics(
        timeout=10).topics, "the topic to be created in west by the replicator")
    return east, west


def wait_for(condition: Any, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def produce(server: Standalone, prefix: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(count):
        producer.produce(TOPIC, key=f"{prefix}-k{i % 7}".encode(),
                         value=f"{prefix}-{i:06d}".encode(), partition=i % PARTITIONS,
                         headers=[("seq", str(i).encode()), ("from", prefix.encode())],
                         timestamp=1_700_000_000_000 + i)
    assert producer.flush(60) == 0


class Bootstrapped(Protocol):
    @property
    def bootstrap(self) -> str: ...


def read_all(server: Bootstrapped, topic: str = TOPIC, partitions: int = PARTITIONS
             ) -> list[Message]:
    """Every message of the topic up to the high watermarks, read_committed."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "geo-verify",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        ends = {}
        for p in range(partitions):
            ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                     cached=False)[1]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Message] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None  # a record has both
                # a consumed record's headers are a list of (key, bytes) (the stubs allow a
                # dict and str values, which only a produce call takes)
                headers = cast(list[tuple[str, bytes]], msg.headers() or [])
                got.append(Message(partition, offset, msg.key(), msg.value(),
                                   tuple(headers), msg.timestamp()[1]))
                if offset + 1 >= ends[partition]:
                    done.add(partition)
            # an aborted tail or markers: the position reaches the end without a message
            for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        assert len(done) == partitions, f"read stopped short: {ends}"
        return with_batch_origins(got)
    finally:
        consumer.close()


def with_batch_origins(messages: list[Message]) -> list[Message]:
    """Each record of a batch forwarded whole gets the origin headers its first record carries
    for the batch (`lw.origin`, `lw.origin.offset` + its place, gateway/replication/batches.py),
    so that tests see every record's origin, as a consumer reading the batch from its start
    can tell."""
    out: dict[tuple[int, int], Message] = {}
    batch: dict[int, tuple[int, int, bytes, int]] = {}  # partition -> (first, end, origin, o)
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        headers = dict(m.headers)
        if "lw.origin.records" in headers:
            batch[m.partition] = (m.offset, m.offset + int.from_bytes(
                headers["lw.origin.records"], "big"), headers["lw.origin"], int.from_bytes(
                headers["lw.origin.offset"], "big"))
        elif m.partition in batch and batch[m.partition][0] < m.offset < batch[m.partition][1]:
            first, _, origin, at = batch[m.partition]
            m = replace(m, headers=(*m.headers, ("lw.origin", origin),
                                    ("lw.origin.offset", (at + m.offset - first).to_bytes(
                                        8, "big"))))
        out[(m.partition, m.offset)] = m
    return [out[(m.partition, m.offset)] for m in messages]  # in the order read


def status(server: Standalone) -> list[dict[str, Any]]:
    """GET /admin/v1/replication's rows (straight over HTTP: polled often, a CLI run per poll
    would load the machine; the tests run `ledgerwire admin replication status` too)."""
    url = f"http://127.0.0.1:{server.admin_port}/admin/v1/replication"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return list(json.load(answer)["partitions"])


def drained(server: Standalone) -> bool:
    try:
        rows = status(server)
    except OSError:  # the admin listener comes up just after the Kafka one
        return False
    return bool(rows) and all(r["state"] == "idle" and r["backlog_messages"] == 0 for r in rows)


def native(messages: list[Message], partitions: int = PARTITIONS) -> dict[int, list[Message]]:
    out: dict[int, list[Message]] = {p: [] for p in range(partitions)}
    for m in messages:
        if m.origin is None:
            out[m.partition].append(m)
    return out


def arrived_from(messages: list[Message], origin: str, partitions: int = PARTITIONS
                 ) -> dict[int, list[Message]]:
    out: dict[int, list[Message]] = {p: [] for p in range(partitions)}
    for m in messages:
        if m.origin == origin:
            out[m.partition].append(m)
    return out


def assert_replicated(source: list[Message], target: list[Message], origin: str,
                      partitions: int = PARTITIONS) -> None:
    """Every message written in the source is in the target once, in order, unchanged."""
    sent, arrived = native(source, partitions), arrived_from(target, origin, partitions)
    for p in range(partitions):
        want = [(m.key, m.value, m.user_headers, m.timestamp) for m in sent[p]]
        got = [(m.key, m.value, m.user_headers, m.timestamp) for m in arrived[p]]
        assert got == want, f"partition {p}: {len(got)} arrived, {len(want)} written"
        offsets = [int.from_bytes(dict(m.headers)["lw.origin.offset"], "big")
                   for m in arrived[p]]
        assert offsets == [m.offset for m in sent[p]]
