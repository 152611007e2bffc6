"""Kafka share groups (KIP-932) vs a classic consumer group on one partition: records/s and the
broker's CPU time per record.

    .venv/bin/python benchmarks/bench_share_groups.py [--records 20000]

One `ledgerwire standalone` (fsync on); confluent-kafka fills a one-partition topic with 100-byte
records; then, each on its own group, the same records are read by a classic consumer group
(confluent-kafka, auto-commit off, one commit at the end), by a share group of one Java
KafkaShareConsumer (kafka-clients 4.3, explicit acknowledgement, accept + commitSync per poll of
up to 500 records), by a share group of three, and by a share group of one librdkafka share
consumer (confluent-kafka's ShareConsumer, a preview; implicit acknowledgement: a poll accepts
the previous poll's records). Records/s counts from a consumer's first
record to its last (JVM start-up excluded); broker CPU per record is the standalone's user +
system CPU time over the phase, divided by the records. A share group pays for per-record state
made durable twice per poll (the acquisition before the records are revealed, the
acknowledgements before they are confirmed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.java_clients import parse_lines, start_java  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from common import cpu_seconds as common_cpu_seconds  # noqa: E402
from common import throwaway_standalone  # noqa: E402

VALUE = os.urandom(100)


def cpu_seconds(pid: int) -> float:
    """The broker's CPU seconds so far (this benchmark needs /proc)."""
    seconds = common_cpu_seconds(pid)
    assert seconds is not None, "needs /proc"
    return seconds


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=VALUE)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def classic(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-classic",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, first = 0, 0.0
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            if message.error() is None:
                first = first or time.monotonic()
                got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    return got / (time.monotonic() - first)


def share(bootstrap: str, topic: str, count: int, consumers: int) -> float:
    group = f"bench-share-{consumers}"
    procs = [start_java("KafkaShareConsume", bootstrap=bootstrap, topic=topic, group=group,
                        count=count, timeout_ms=300_000, idle_ms=3_000, quiet="true",
                        group_configs="share.auto.offset.reset=earliest")
             for _ in range(consumers)]
    dones = []
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        if proc.returncode != 0:
            raise RuntimeError(err[-3000:])
        dones += [e for e in parse_lines(out) if e.get("event") == "done"]
    accepted = sum(d["accepted"] for d in dones)
    if accepted != count:
        raise RuntimeError(f"share group of {consumers} accepted {accepted} of {count}")
    first = min(d["first_ms"] for d in dones if d["first_ms"])
    last = max(d["last_ms"] for d in dones)
    return count / max(0.001, (last - first) / 1000)


def share_librdkafka(bootstrap: str, topic: str, count: int) -> float:
    group = "bench-share-librdkafka"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    got, first, last = 0, 0.0, 0.0
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        messages = consumer.poll(1.0)
        if len(messages):
            first = first or time.monotonic()
            got += sum(1 for m in messages if m.error() is None)
            last = time.monotonic()
    consumer.commit_sync(60)
    consumer.close()
    if got < count:
        raise RuntimeError(f"librdkafka share consumer got {got} of {count}")
    return count / max(0.001, last - first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    with throwaway_standalone() as server:
        assert server.proc is not None
        pid = server.proc.pid
        fill(server.bootstrap, "bench-share", args.records)
        rows = []
        for name, run in (
            ("classic group, 1 consumer", lambda: classic(server.bootstrap, "bench-share",
                                                          args.records)),
            ("share group, 1 consumer", lambda: share(server.bootstrap, "bench-share",
                                                      args.records, 1)),
            ("share group, 3 consumers", lambda: share(server.bootstrap, "bench-share",
                                                       args.records, 3)),
            ("share group, 1 librdkafka", lambda: share_librdkafka(
                server.bootstrap, "bench-share", args.records)),
        ):
            cpu = cpu_seconds(pid)
            rate = run()
            used = cpu_seconds(pid) - cpu
            rows.append((name, rate, used / args.records * 1e6))
    print(f"{args.records} records of 100 bytes, one partition")
    print(f"{'reader':<28}{'records/s':>12}{'broker CPU µs/record':>24}")
    for name, rate, cpu_us in rows:
        print(f"{name:<28}{rate:>12,.0f}{cpu_us:>24,.1f}")


if __name__ == "__main__":
    main()
