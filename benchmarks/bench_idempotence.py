"""Idempotent vs non-idempotent produce on one ledgerwire standalone, in one run.

    .venv/bin/python benchmarks/bench_idempotence.py [--messages 100000] [--repeat 3]
                                                     [--skip-kafka-python]

The same broker (`ledgerwire standalone`, fsync on) is driven by confluent-kafka with
`enable.idempotence` false and true, and by kafka-python 3 with `enable_idempotence` False
and True (1 KB values, acks=all, linger 5 ms, 128 KiB batches), on 1 and 8 partitions. It
prints msg/s, the broker's CPU microseconds per message (user + system, /proc) and the
idempotent / non-idempotent ratio of each client and partition count. Issue 15 asks for a
ratio >= 0.95. With --repeat N each figure is the median of N runs (the machine may be shared).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kafka import (  # noqa: E402
    VALUE,
    create_topic,
    ledgerwire,
    measured,
    produce_throughput,
)


def confluent_produce(bootstrap: str, topic: str, partitions: int, count: int,
                      idempotent: bool) -> float:
    return produce_throughput(bootstrap, topic, partitions, count,
                              {"enable.idempotence": idempotent})


def kafka_python_produce(bootstrap: str, topic: str, partitions: int, count: int,
                         idempotent: bool) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             batch_size=131072, enable_idempotence=idempotent)
    try:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-kafka-python", action="store_true")
    args = parser.parse_args()
    clients = {"confluent-kafka": confluent_produce}
    if not args.skip_kafka_python:
        clients["kafka-python"] = kafka_python_produce
    results: dict[str, float] = {}
    with ledgerwire() as (bootstrap, pid):
        for partitions in (1, 8):
            for client, produce in clients.items():
                # kafka-python pays Python per message: fewer messages keep the run short
                count = args.messages if client == "confluent-kafka" else args.messages // 4
                for idempotent in (False, True):
                    topic = f"idem-{client}-{partitions}p-{int(idempotent)}"
                    create_topic(bootstrap, topic, partitions)
                    metric = f"{client} {partitions}p {'idem' if idempotent else 'plain'} msg/s"
                    measured(pid, results, metric, count,
                             partial(produce, bootstrap, topic, partitions, count, idempotent),
                             args.repeat)
                    cpu = results.get(metric.replace("msg/s", "cpu us/msg"), float("nan"))
                    print(f"  {metric}: {results[metric]:,.0f} (broker {cpu:.1f} us/msg)",
                          flush=True)
    print()
    print(f"{'client':16} {'parts':>5} {'plain msg/s':>12} {'idem msg/s':>12} {'ratio':>6} "
          f"{'plain us/msg':>12} {'idem us/msg':>12}")
    for partitions in (1, 8):
        for client in clients:
            plain = results[f"{client} {partitions}p plain msg/s"]
            idem = results[f"{client} {partitions}p idem msg/s"]
            plain_cpu = results.get(f"{client} {partitions}p plain cpu us/msg", float("nan"))
            idem_cpu = results.get(f"{client} {partitions}p idem cpu us/msg", float("nan"))
            print(f"{client:16} {partitions:5} {plain:12,.0f} {idem:12,.0f} {idem / plain:6.2f} "
                  f"{plain_cpu:12.1f} {idem_cpu:12.1f}")
    print("(ratio: idempotent / non-idempotent throughput on the same broker; issue 15: >= 0.95)")


if __name__ == "__main__":
    main()
