"""Idempotent vs non-idempotent produce on one ledgerwire standalone, in one run.

    .venv/bin/python benchmarks/bench_idempotence.py [--messages 100000] [--repeat 3]
                                                     [--skip-kafka-python] [--skip-java]
                                                     [--no-warm-up] [--broker-config TOML]

The same broker (`ledgerwire standalone`, fsync on) is driven, on 1 and 8 partitions, 1 KB
values, by:

- confluent-kafka with `enable.idempotence` false and true, first with this repository's
  benchmark settings (acks=all, linger 5 ms, 128 KiB batches), then with the client's defaults
  (only `enable.idempotence` set: acks=all, linger 5 ms, 1 MB batches in librdkafka 2.x);
- kafka-python 3 with `enable_idempotence` False and True, with the benchmark settings, then
  with its defaults (idempotent, acks=all, linger 0, 16 KiB batches; plain is the same with
  `enable_idempotence=False`);
- Apache Kafka's Java producer (kafka-clients 4.x, benchmarks/java/KafkaProducePerf.java) with
  `enable.idempotence` false and true and the benchmark settings.

It prints msg/s, the broker's CPU microseconds per message (user + system, /proc) and the
idempotent / non-idempotent ratio of each client, settings and partition count.  Issue 15 asks
for a ratio >= 0.95.  With --repeat N each figure is the median of N runs (the machine may be
shared).

Every rate is timed from a warmed-up producer (one message per partition produced and
acknowledged first; Java: its first 5% of the records): a rate must not include the client's
start, and librdkafka's idempotent producer spends ~0.5 s of it waiting for its producer id (it
asks when no broker connection is up yet and retries on a 500 ms timer, against any broker).
Untimed, that start alone halved the idempotent figures of runs of 100,000 messages.
`--no-warm-up` times the start too, as this benchmark did before.

Beside each run it prints why the ratio is what it is: the Produce requests the broker
answered, their mean latency in the broker and the mean journal write + fsync time (from the
standalone's /metrics), and for confluent-kafka librdkafka's own statistics: the mean number of
Produce requests in flight on the connection and its round-trip time.  librdkafka (up to at
least 2.16) and kafka-python 3.0 send ONE batch per partition at a time when idempotent
(librdkafka counts the *messages* in flight against its limit of 5 requests per partition;
kafka-python mutes a partition while it has a batch in flight), so each partition waits a whole
Produce round trip with its journal fsync per batch, while without idempotence many requests
share one group-committed fsync.  The broker accepts pipelined batches (the producer state
follows the last *assigned* sequence, and acknowledgements follow durability in order), which
the Java producer, with up to 5 batches per partition in flight, uses.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kafka import (  # noqa: E402
    PRODUCER_CONF,
    VALUE,
    create_topic,
    measured,
    produce_throughput,
)
from common import throwaway_standalone  # noqa: E402

from tests.support.standalone import Standalone  # noqa: E402

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
_SUM_OR_COUNT = re.compile(
    r'^(ledgerwire_request_latency_seconds|ledgerwire_journal_fsync_seconds)_(sum|count)'
    r'\{(?:api="Produce"|bookie="[^"]*")\} (\S+)$', re.MULTILINE)


@contextmanager
def ledgerwire(config: Path | None = None) -> Iterator[Standalone]:
    """`config`: a TOML file for the standalone (e.g. [storage] fsync = false, to see what the
    journal fsync costs each round trip)."""
    extra = ["--config", str(config)] if config is not None else []
    with throwaway_standalone(["--log-level", "WARNING", *extra]) as server:
        yield server


def broker_latency(admin_port: int) -> dict[str, float]:
    """Sums and counts of the broker's Produce latency and its journal write + fsync times."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    totals = dict.fromkeys(("produce sum", "produce count", "fsync sum", "fsync count"), 0.0)
    for name, kind, value in _SUM_OR_COUNT.findall(text):
        key = f"{'produce' if 'request' in name else 'fsync'} {kind}"
        totals[key] += float(value)
    return totals


class InFlight:
    """librdkafka statistics of the last run: Produce requests in flight, round trip."""

    def __init__(self) -> None:
        self.in_flight: list[int] = []
        self.rtt_us: list[int] = []

    def config(self) -> dict[str, Any]:
        self.in_flight.clear()
        self.rtt_us.clear()
        return {"statistics.interval.ms": 200, "stats_cb": self._on_stats}

    def _on_stats(self, raw: str) -> None:
        for broker in json.loads(raw)["brokers"].values():
            if broker["nodeid"] >= 0 and broker["tx"]:
                self.in_flight.append(broker["waitresp_cnt"])
                if broker["rtt"]["cnt"]:
                    self.rtt_us.append(broker["rtt"]["avg"])

    def summary(self) -> str:
        if not self.in_flight:
            return ""
        return (f"; librdkafka: {statistics.mean(self.in_flight):.1f} requests in flight, "
                f"round trip {statistics.mean(self.rtt_us or [0]) / 1000:.1f} ms")


BENCH_SETTINGS = "bench"
CLIENT_DEFAULTS = "defaults"


def confluent_produce(stats: InFlight, settings: str, warm_up: bool, bootstrap: str, topic: str,
                      partitions: int, count: int, idempotent: bool) -> float:
    return produce_throughput(
        bootstrap, topic, partitions, count, {"enable.idempotence": idempotent, **stats.config()},
        base_config=PRODUCER_CONF if settings == BENCH_SETTINGS else {}, warm_up=warm_up)


def kafka_python_produce(settings: str, warm_up: bool, bootstrap: str, topic: str,
                         partitions: int, count: int, idempotent: bool) -> float:
    from kafka import KafkaProducer

    config: dict[str, Any] = {"enable_idempotence": idempotent}
    if settings == BENCH_SETTINGS:
        config.update(acks="all", linger_ms=5, batch_size=131072)
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        if warm_up:
            for i in range(partitions):
                producer.send(topic, VALUE, partition=i)
            producer.flush(60)
        start = time.perf_counter()
        futures = [producer.send(topic, VALUE, partition=i % partitions) for i in range(count)]
        producer.flush(120)
        elapsed = time.perf_counter() - start
        failed = sum(1 for f in futures if f.failed())
        if failed:
            raise RuntimeError(f"{failed} produce errors")
    finally:
        producer.close(10)
    return count / elapsed


def java_produce(warm_up: bool, bootstrap: str, topic: str, partitions: int, count: int,
                 idempotent: bool) -> float:
    """The Java producer's msg/s (benchmark settings) over `count` records, the first 5% of
    them a warm-up unless `warm_up` is false (the JVM start is never timed)."""
    from tests.support.java_clients import run_java

    settings = {"enable.idempotence": str(idempotent).lower(), "acks": "all",
                "linger.ms": PRODUCER_CONF["linger.ms"],
                "batch.size": PRODUCER_CONF["batch.size"]}
    run = run_java("KafkaProducePerf", source_dir=JAVA_SOURCES, timeout=600, topic=topic,
                   count=count - count // 20, warmup=count // 20 if warm_up else 0,
                   partitions=partitions,
                   size=len(VALUE), bootstrap=bootstrap, kafka=settings)
    return float(run.one("done")["msg_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-kafka-python", action="store_true")
    parser.add_argument("--skip-java", action="store_true")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="time each producer from its creation (its start included)")
    parser.add_argument("--broker-config", type=Path, metavar="TOML",
                        help="configuration file for the standalone")
    args = parser.parse_args()
    warm_up = not args.no_warm_up
    stats = InFlight()
    # (client, settings) -> produce(bootstrap, topic, partitions, count, idempotent)
    runs: dict[tuple[str, str], Callable[..., float]] = {}
    for settings in (BENCH_SETTINGS, CLIENT_DEFAULTS):
        runs["confluent-kafka", settings] = partial(confluent_produce, stats, settings, warm_up)
        if not args.skip_kafka_python:
            runs["kafka-python", settings] = partial(kafka_python_produce, settings, warm_up)
    if not args.skip_java:
        from tests.support.java_clients import java_available

        if java_available():
            runs["java", BENCH_SETTINGS] = partial(java_produce, warm_up)
        else:
            print("no JDK on PATH: the Java producer is left out")
    results: dict[str, float] = {}
    with ledgerwire(args.broker_config) as server:
        bootstrap, pid = server.bootstrap, server.proc.pid if server.proc else 0
        for partitions in (1, 8):
            for (client, settings), produce in runs.items():
                # kafka-python pays Python per message: fewer messages keep the run short
                count = args.messages if client != "kafka-python" else args.messages // 4
                for idempotent in (False, True):
                    topic = f"idem-{client}-{settings}-{partitions}p-{int(idempotent)}"
                    create_topic(bootstrap, topic, partitions)
                    metric = (f"{client} {settings} {partitions}p "
                              f"{'idem' if idempotent else 'plain'} msg/s")
                    before = broker_latency(server.admin_port)
                    measured(pid, results, metric, count,
                             partial(produce, bootstrap, topic, partitions, count, idempotent),
                             args.repeat)
                    after = broker_latency(server.admin_port)
                    requests = after["produce count"] - before["produce count"]
                    latency = (after["produce sum"] - before["produce sum"]) / max(requests, 1)
                    groups = after["fsync count"] - before["fsync count"]
                    fsync = (after["fsync sum"] - before["fsync sum"]) / max(groups, 1)
                    cpu = results.get(metric.replace("msg/s", "cpu us/msg"), float("nan"))
                    print(f"  {metric}: {results[metric]:,.0f} (broker {cpu:.1f} us/msg; "
                          f"{requests:.0f} Produce requests, {latency * 1e3:.1f} ms each in "
                          f"the broker; {groups:.0f} journal groups, write+fsync "
                          f"{fsync * 1e3:.1f} ms"
                          f"{stats.summary() if client == 'confluent-kafka' else ''})",
                          flush=True)
    print()
    print(f"{'client':16} {'settings':9} {'parts':>5} {'plain msg/s':>12} {'idem msg/s':>12} "
          f"{'ratio':>6} {'plain us/msg':>12} {'idem us/msg':>12}")
    for partitions in (1, 8):
        for client, settings in runs:
            key = f"{client} {settings} {partitions}p"
            plain, idem = results[f"{key} plain msg/s"], results[f"{key} idem msg/s"]
            plain_cpu = results.get(f"{key} plain cpu us/msg", float("nan"))
            idem_cpu = results.get(f"{key} idem cpu us/msg", float("nan"))
            print(f"{client:16} {settings:9} {partitions:5} {plain:12,.0f} {idem:12,.0f} "
                  f"{idem / plain:6.2f} {plain_cpu:12.1f} {idem_cpu:12.1f}")
    timed = ("every rate leaves out the producer's start (warmed up first)" if warm_up
             else "rates include each producer's start (--no-warm-up)")
    print("(ratio: idempotent / non-idempotent throughput on the same broker; issue 15: >= 0.95."
          " bench: acks=all, linger 5 ms, 128 KiB batches; defaults: the client's own;"
          f" {timed}; Java's also leave out its JVM start)")


if __name__ == "__main__":
    main()
