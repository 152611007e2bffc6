"""Transactional produce throughput relative to idempotent produce, in one run.

    .venv/bin/python benchmarks/bench_transactions.py [--messages 50000] [--per-txn 1000 100]
                                                      [--rounds 3]

One `ledgerwire standalone` (fsync on), one confluent-kafka producer per phase, 1 KB values,
acks=all, linger.ms=5, batch.size=131072, on a 4-partition topic:

- idempotent: enable.idempotence=true, `--messages` records, then flush;
- transactional, for each `--per-txn` size n: the same records in transactions of n records
  (begin, produce n, commit), so the cost of AddPartitionsToTxn + EndTxn + one marker per
  partition is paid every n records.

The phases run in turn `--rounds` times (the machine is shared, so one phase must not get a
quiet moment the other did not); each phase's median is printed, in records/s and MB/s, with
its ratio to the idempotent median; then the read_committed consume rate of a transactional
topic (the LSO and aborted-index path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from common import throwaway_standalone  # noqa: E402

VALUE = os.urandom(1024)
PARTITIONS = 4
PRODUCER_CONF = {"acks": "all", "linger.ms": 5, "batch.size": 131072, "compression.type": "none"}


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=1)])[topic].result(30)


def produce_all(producer: Producer, topic: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)


def idempotent_rate(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         **PRODUCER_CONF})
    produce_all(producer, topic, 1000)  # warm up: connections, partitions opened
    assert producer.flush(60) == 0
    started = time.perf_counter()
    produce_all(producer, topic, count)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def transactional_rate(bootstrap: str, topic: str, count: int, per_txn: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}",
                         **PRODUCER_CONF})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_all(producer, topic, 1000)  # warm up
    producer.commit_transaction(60)
    started = time.perf_counter()
    done = 0
    while done < count:
        n = min(per_txn, count - done)
        producer.begin_transaction()
        produce_all(producer, topic, n, done)
        producer.commit_transaction(120)
        done += n
    return count / (time.perf_counter() - started)


def read_committed_rate(bootstrap: str, topic: str, expected: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    deadline = started + 120
    while got < expected and time.perf_counter() < deadline:
        for m in consumer.consume(num_messages=10000, timeout=1.0):
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < expected:
        raise RuntimeError(f"read_committed consumer got {got} of {expected} records")
    return got / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--per-txn", type=int, nargs="+", default=[1000, 100])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mb = len(VALUE) / 1e6
    with throwaway_standalone() as server:
        bootstrap = server.bootstrap
        create_topic(bootstrap, "bench-idem")
        for n in args.per_txn:
            create_topic(bootstrap, f"bench-txn-{n}")
        rates: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            rates.setdefault("idempotent", []).append(
                idempotent_rate(bootstrap, "bench-idem", args.messages))
            for n in args.per_txn:
                rates.setdefault(f"transactional n={n}", []).append(
                    transactional_rate(bootstrap, f"bench-txn-{n}", args.messages, n))
        base = statistics.median(rates["idempotent"])
        for name, samples in rates.items():
            rate = statistics.median(samples)
            print(f"{name:<22} {rate:10.0f} rec/s {rate * mb:7.1f} MB/s  {rate / base:.2f}x"
                  f"   (rounds: {', '.join(f'{r:.0f}' for r in samples)})")
        topic = f"bench-txn-{args.per_txn[0]}"
        rate = read_committed_rate(bootstrap, topic, (args.messages + 1000) * args.rounds)
        print(f"read_committed consume {rate:10.0f} rec/s {rate * mb:7.1f} MB/s")


if __name__ == "__main__":
    main()
