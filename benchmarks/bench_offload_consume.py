"""Tiered storage: a confluent-kafka drain of offloaded data vs the same data on bookies.

Starts a real `ledgerwire standalone` (subprocess, fsync off) with `[offload]` to a directory
(no deletion lag), fills two topics alike (--partitions partitions, --bytes each of --value-bytes
values, 8 MB ledgers via segment.bytes), restarts the broker (the open ledgers close),
offloads every closed ledger of one of them with `ledgerwire admin topics offload` (its
bookie copies go at once), restarts the broker again so no broker cache holds either
topic (the OS page cache holds both: the entry log and the objects were just written), then
drains each topic with one confluent-kafka consumer, in turn (offloaded first, then bookies;
then both again: a second round reads with warm broker caches; the offloaded topic's block
cache holds [offload] cache_mb = 64 MB by default). Prints MB/s, the
broker's CPU per MB (from /proc/<pid>/stat; the bookie lives in the broker process in a
standalone) and the ratio offloaded / bookies in the same run (issue 18's goal: >= 0.8x).

    python benchmarks/bench_offload_consume.py                   # 2 x 128 MiB, 4 partitions
    python benchmarks/bench_offload_consume.py --bytes 64MiB --rounds 1
    python benchmarks/bench_offload_consume.py --s3     # moto's S3 server (slow Python)

This is a measuring tool: it must never be imported by the package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from bench_spark_replay import cpu_seconds, parse_size  # noqa: E402
from support.standalone import Standalone  # noqa: E402

SEGMENT_BYTES = 8 << 20


def fill(
    bootstrap: str, topics: list[str], partitions: int, total_bytes: int, value_bytes: int
) -> int:
    """The same records into each topic; returns the record count per topic."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, partitions, 1, config={"segment.bytes": str(SEGMENT_BYTES)}) for t in topics]
    for future in admin.create_topics(new).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "none",
                         "queue.buffering.max.kbytes": 512 * 1024})  # fmt: skip
    count = total_bytes // value_bytes
    payload = os.urandom(value_bytes * 2)
    for i in range(count):
        value = payload[i % value_bytes : i % value_bytes + value_bytes]
        for topic in topics:
            while True:
                try:
                    producer.produce(topic, value=value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
    if producer.flush(600) != 0:
        raise RuntimeError("messages left undelivered")
    return count


def drain(bootstrap: str, topic: str, partitions: int, count: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offload",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 16 << 20})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows = nbytes = 0
    deadline = time.monotonic() + 900
    while rows < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: {rows:,} of {count:,} records after 900 s")
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() is None:
                rows += 1
                nbytes += len(msg.value() or b"")
    consumer.close()
    return nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", default="128MiB", help="size of each topic")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument(
        "--s3",
        action="store_true",
        help="offload to moto's S3 server (a subprocess) instead of a directory",
    )
    args = parser.parse_args()
    if args.s3:
        from tests.offload.moto_server import moto_s3

        with moto_s3("ledgers") as endpoint:
            run(
                args,
                f'driver = "s3"\nbucket = "ledgers"\nendpoint = "{endpoint}"\n'
                'access_key_id = "x"\nsecret_access_key = "x"\n',
            )
    else:
        run(args, None)


def run(args: argparse.Namespace, s3_driver: str | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-offload-consume-"))
    config = work / "ledgerwire.toml"
    driver = s3_driver or f'driver = "filesystem"\ndirectory = "{work / "tier"}"\n'
    config.write_text(f"[offload]\n{driver}deletion_lag_s = 0\ninterval_s = 3600\n")
    config.chmod(0o600)
    broker = Standalone(work / "data", extra_args=["--no-fsync", "--config", str(config)])
    broker.start(timeout_s=120)
    try:
        t0 = time.time()
        count = fill(
            broker.bootstrap,
            ["bookies", "offloaded"],
            args.partitions,
            parse_size(args.bytes),
            args.value_bytes,
        )
        print(
            f"filled 'bookies' and 'offloaded': {count:,} records of {args.value_bytes} B "
            f"each in {time.time() - t0:.1f} s",
            flush=True,
        )
        broker.restart()  # the open ledgers close (recovered), so all the data can move
        t0 = time.time()
        rows = broker.admin("topics", "offload", "offloaded")
        moved = sum(r["ledgers_offloaded"] for r in rows)
        size = sum(r["bytes_offloaded"] for r in rows)
        left = sum(r["bytes_on_bookies"] for r in rows)
        print(
            f"offloaded {moved} ledgers, {size >> 20} MB in {time.time() - t0:.1f} s "
            f"({left:,} bytes of the topic left on the bookie)",
            flush=True,
        )
        broker.restart()
        assert broker.proc is not None
        pid = broker.proc.pid
        for round_no in range(1, args.rounds + 1):
            rates: dict[str, float] = {}
            for topic in ("offloaded", "bookies"):
                cpu0, t0 = cpu_seconds(pid), time.perf_counter()
                nbytes = drain(broker.bootstrap, topic, args.partitions, count)
                took = time.perf_counter() - t0
                cpu = cpu_seconds(pid) - cpu0
                rates[topic] = nbytes / took
                print(
                    f"round {round_no} drain {topic:<9} {nbytes / took / 1e6:7.1f} MB/s  "
                    f"broker CPU {cpu / (nbytes / 1e6) * 1e3:5.2f} ms/MB "
                    f"({nbytes >> 20} MB in {took:.1f} s)",
                    flush=True,
                )
            print(
                f"round {round_no} offloaded / bookies: "
                f"{rates['offloaded'] / rates['bookies']:.2f}x  (load average "
                f"{os.getloadavg()[0]:.1f})",
                flush=True,
            )
    finally:
        broker.stop(timeout_s=120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
