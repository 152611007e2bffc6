"""Failover and lost-bookie recovery times on a loopback cluster (real processes, real ZooKeeper).

failover  Two brokers, three bookies (E=3 Qw=2 Qa=2).  A confluent-kafka idempotent producer
          (acks=all) writes one partition at ~200 msg/s; its owner is SIGKILLed.  Failover time
          = kill -> first acknowledgement of a message *sent after the kill* (only the new owner
          can have acknowledged it).  Dominated by the ZooKeeper session timeout (--session),
          after which the survivor acquires the bundle, fences and recovers the ledger.  Also
          measured: graceful `admin drain` of the owner -> the longest pause in
          acknowledgements while the partition moves (close ledger, release, open).
recovery  Four bookies with auto-recovery (lost-bookie delay 0).  Ledgers (E=3 Qw=2 Qa=2,
          256 KiB entries) are written with the ledger client until one bookie holds --gb GiB;
          that bookie is SIGKILLed.  Recovery time = kill -> no ledger names it and no
          under-replication mark is left (three replication workers copy in parallel).

Usage: python benchmarks/bench_failover.py [failover|recovery|all] [--rounds 5] [--gb 1.0]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from tests.cluster.cluster_processes import Cluster  # noqa: E402
from tests.cluster.kafka_workload import create_topic  # noqa: E402
from tests.cluster.ledger_check import check_ledgers  # noqa: E402


class PartitionProducer:
    """Produce to one partition; remember (sent, acked) monotonic times per message."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 0, "message.timeout.ms": 120000, "request.timeout.ms": 30000,
            "retry.backoff.ms": 20, "retry.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 500, "metadata.max.age.ms": 2000,
        })
        self.topic, self.partition = topic, partition
        self.acks: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, sent: float, err: object, msg: object) -> None:
        if err is None:
            self.acks.append((sent, time.monotonic()))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                self.producer.produce(self.topic, str(n).encode(), partition=self.partition,
                                      on_delivery=functools.partial(self._delivered, sent))
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.005)
        self.producer.flush(60)

    def first_ack_sent_after(self, t: float, timeout_s: float = 120.0) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for sent, acked in list(self.acks):
                if sent >= t:
                    return acked - t
            time.sleep(0.01)
        raise TimeoutError("no acknowledgement after the fault")

    def longest_ack_gap(self, t0: float, t1: float) -> float:
        """The longest time without any acknowledgement within [t0, t1]."""
        times = sorted(acked for _, acked in list(self.acks))
        inside = [t for t in times if t0 <= t <= t1]
        before = [t for t in times if t < t0][-1:]
        points = before + inside
        return max((b - a for a, b in zip(points, points[1:], strict=False)), default=t1 - t0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def bench_failover(base: Path, rounds: int, session_s: float) -> None:
    kills: list[float] = []
    drains: list[float] = []
    with Cluster(base / "failover", bookies=3, brokers=2, session_timeout_s=session_s,
                 partitions=2, fsync=True) as cluster:
        create_topic(cluster.bootstrap, "fo", 2)
        producer = PartitionProducer(cluster.bootstrap, "fo", 0)
        try:
            time.sleep(2.0)
            for _ in range(rounds):
                owner = cluster.partition_owner("fo", 0)
                assert owner is not None
                t0 = time.monotonic()
                cluster.brokers[owner].kill()
                kills.append(producer.first_ack_sent_after(t0))
                cluster.add_broker(owner)
                cluster.wait_all_bundles_owned(by={1, 2})
                time.sleep(2.0)
                owner = cluster.partition_owner("fo", 0)
                t0 = time.monotonic()
                result = cluster.cli("admin", "drain", str(owner), "--wait", "60")
                assert result.returncode == 0, result.stderr
                time.sleep(1.0)
                drains.append(producer.longest_ack_gap(t0, time.monotonic()))
                cluster.cli("admin", "undrain", str(owner))
                time.sleep(2.0)
        finally:
            producer.stop()
    print(f"failover (owner SIGKILL -> first ack on new owner), ZooKeeper session {session_s} s,"
          f" {rounds} rounds: min {min(kills):.2f} s, median {statistics.median(kills):.2f} s,"
          f" max {max(kills):.2f} s")
    print(f"graceful drain (longest pause in acknowledgements): min {min(drains):.3f} s, "
          f"median {statistics.median(drains):.3f} s, max {max(drains):.3f} s")


async def _fill(metadata_url: str, victim: str, target_bytes: int, entry_bytes: int,
                ledgers: int) -> tuple[int, int]:
    from ledger_backend.client.bookkeeper import BookKeeper
    from ledger_backend.metadata import open_store

    store = await open_store(metadata_url)
    payload = os.urandom(entry_bytes)
    held = written = 0
    try:
        async with BookKeeper(store) as bk:
            handles = [await bk.create_ledger(3, 2, 2) for _ in range(ledgers)]

            async def write(handle: object) -> None:
                nonlocal held, written
                while held < target_bytes:
                    entry_id = await handle.append(payload)  # type: ignore[attr-defined]
                    written += entry_bytes
                    if victim in handle.metadata.write_set_bookies(entry_id):  # type: ignore[attr-defined]
                        held += entry_bytes

            async with trio.open_nursery() as nursery:
                for handle in handles:
                    nursery.start_soon(write, handle)
            for handle in handles:
                await handle.close()
    finally:
        await store.close()
    return held, written


def bench_recovery(base: Path, gib: float) -> None:
    with Cluster(base / "recovery", bookies=4, brokers=0, lost_bookie_delay_s=0.0,
                 open_ledger_grace_s=5.0, fsync=True) as cluster:
        victim = cluster.bookies[0]
        started = time.monotonic()
        held, written = trio.run(_fill, cluster.metadata_url, victim.bookie_id,  # type: ignore[attr-defined]
                                 int(gib * (1 << 30)), 256 << 10, 24)
        fill_s = time.monotonic() - started
        print(f"wrote {written / (1 << 30):.2f} GiB in {fill_s:.0f} s "
              f"({written / fill_s / (1 << 20):.0f} MiB/s); the victim holds "
              f"{held / (1 << 30):.2f} GiB", flush=True)
        t0 = time.monotonic()
        victim.kill()
        dead = {victim.bookie_id}  # type: ignore[attr-defined]
        while True:
            report = check_ledgers(cluster.metadata_url, dead, read=False)
            if not report.on_dead and not cluster.status()["underreplicated_ledgers"]:
                break
            if time.monotonic() - t0 > 3600:
                raise TimeoutError("recovery did not finish in an hour")
            time.sleep(0.5)
        took = time.monotonic() - t0
        import re

        copied = sum(int(n) for b in cluster.bookies[1:] for n in re.findall(
            rb"re-replicated: (\d+) entries copied", b.log_path.read_bytes()))
        print(f"replication workers copied {copied} entries "
              f"({copied * (256 << 10) / (1 << 30):.2f} GiB)", flush=True)
        print(f"lost-bookie recovery: {held / (1 << 30):.2f} GiB re-replicated in {took:.1f} s "
              f"({held / took / (1 << 20):.0f} MiB/s), ZooKeeper session "
              f"{cluster.session_timeout_s} s, lost-bookie delay 0", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="?", default="all", choices=("failover", "recovery", "all"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session", type=float, default=4.0, help="ZooKeeper session (s)")
    parser.add_argument("--gb", type=float, default=1.0, help="GiB held by the lost bookie")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ledgerwire-bench-") as tmp:
        if args.what in ("failover", "all"):
            bench_failover(Path(tmp), args.rounds, args.session)
        if args.what in ("recovery", "all"):
            bench_recovery(Path(tmp), args.gb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
