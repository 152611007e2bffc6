"""Kafka produce/consume over 8 partitions: `standalone --workers 2` vs `--workers 1`, one run.

    .venv/bin/python benchmarks/bench_workers.py [--messages 50000] [--workers 2] [--repeat 1]
        [--rocketmq [--sends 5000]] [--bookies-process]

Each shape runs as a real `ledgerwire standalone` (fsync on) on loopback, driven by the same
confluent-kafka code as benchmarks/bench_kafka.py: 1 KB values, acks=all, linger.ms=5, one
producer and one consumer (librdkafka spreads them over every broker it is sent to; the
consumer with fetch.queue.backoff.ms = 10, see CONSUMER_CONF).  With
N workers the benchmark waits until every partition of the topic is led by the worker the
ownership's rendezvous hash gives its bundle (a new node's bundles are handed back one at a
time after cluster.handback_delay_s): a partition that moves during a run costs its clients a
NOT_LEADER answer, a metadata refresh and the new owner's fencing and recovery, so a run
that starts at the first hand-back measures the moves, not the shape.

With --rocketmq each shape also serves RocketMQ and the same topic gets --sends sends from 8
threads of the C++ client (rocketmq-client-python, bench_rocketmq.send_run: one producer
instance per thread, send_sync), through the node's name server.

--bookies-process also runs the N-worker node with all bookies in one process of their own
(storage.worker_bookies = false, the shape before session 8), as a third shape of the run.

Printed: msg/s of each shape and their ratio (from this one run), the node's CPU time per
message (user + system of the supervisor and every worker process, from /proc),
which load on a shared machine disturbs less than throughput, split per process, and the
client's own CPU per message (this process: the clients run on the same cores as the
brokers).  When a node fails, the tail of its log is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import trio
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_kafka import consume_throughput, produce_throughput  # noqa: E402
from common import cpu_seconds  # noqa: E402

from gateway.cluster.broker_registry import BUNDLES_PATH  # noqa: E402
from gateway.cluster.bundle_placement import bundle_of, target_broker  # noqa: E402
from gateway.config.settings import Config  # noqa: E402
from gateway.process.supervisor import cluster_layout  # noqa: E402
from ledger_backend.metadata import open_store  # noqa: E402
from tests.support.standalone import Standalone, free_port_range  # noqa: E402

PARTITIONS = 8
# librdkafka (2.16 here) postpones a partition's next fetch by fetch.queue.backoff.ms (1 s by
# default) once its local queue is over queued.max.messages.kbytes; two brokers fill that queue
# twice as fast as one, and a 300,000-message consume of a 2-worker node then stalled ~1 s in
# most runs (0.33-0.79x one worker, with 0.2-0.5 of the cores busy).  A client's pause, not
# the node's: both shapes run with a short back-off.
CONSUMER_CONF = {"fetch.queue.backoff.ms": 10}


class Node(Standalone):
    def __init__(self, data_dir: Path, workers: int, rocketmq: bool = False,
                 bookies_process: bool = False, storage: str = "") -> None:
        # one bookie per worker (each worker serves its own): their ports are reserved
        super().__init__(data_dir, bookies=workers,
                         extra_args=["--workers", str(workers), "--log-level", "INFO",
                                     *([] if rocketmq else ["--no-rocketmq"])])
        self.workers = workers
        self.kafka_port = free_port_range(workers)
        if rocketmq:  # bundle b of worker i on base + 16 i + b (16 bundles up to 4 workers)
            self.rocketmq_broker_port = free_port_range(max(16, 4 * workers) * workers)
            self.extra_args += ["--rocketmq-grpc-listener", ""]
        if bookies_process:
            storage = f"worker_bookies = false\n{storage}"
        if storage:  # [storage] lines of the node's TOML
            config = data_dir.parent / "node.toml"
            data_dir.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(f"[storage]\n{storage}")
            self.extra_args += ["--config", str(config)]

    def _accepts(self) -> bool:
        return self.workers == 1 and super()._accepts()

    def pids(self) -> dict[str, int]:
        """Each process of the node by name ("node" alone with one worker)."""
        assert self.proc is not None
        found = {name: int(pid) for name, pid in re.findall(
            r"ledgerwire (bookies|worker \d+) started \(pid (\d+)\)",
            self.log_path.read_text(errors="replace"))}
        return {"supervisor" if found else "node": self.proc.pid, **dict(sorted(found.items()))}


@contextmanager
def node(workers: int, rocketmq: bool = False, bookies_process: bool = False) -> Iterator[Node]:
    with tempfile.TemporaryDirectory() as tmp:
        server = Node(Path(tmp) / "data", workers, rocketmq, bookies_process)
        try:
            server.start(180)
            yield server
        except BaseException:
            print(f"--workers {workers} failed; its log ends:\n{server.log()[-4000:]}",
                  file=sys.stderr)
            raise
        finally:
            server.stop(120)


def process_cpu(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) or 0.0 for name, pid in pids.items()}


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread: librdkafka's, the C++ client's
    return usage.ru_utime + usage.ru_stime


def settled_leaders(topic: str, workers: int) -> list[int]:
    """Each partition's leader once the new node's hand-backs are done (node ids 0..N-1, the
    default kafka.broker_id): the rendezvous target of its bundle."""
    bundles = cluster_layout(Config(), workers).bundles
    return [target_broker(bundle_of(topic, p, bundles), list(range(workers))) or 0
            for p in range(PARTITIONS)]


def bundle_owners(data_dir: Path) -> dict[int, int]:
    """Each owned bundle's owner (node id), read from the node's store (read-only)."""

    async def read() -> dict[int, int]:
        store = await open_store(f"embedded-ro:{data_dir / 'metadata'}")
        try:
            owners = {}
            for child in await store.children(BUNDLES_PATH):
                data, _ = await store.get(f"{BUNDLES_PATH}/{child}")
                owners[int(child)] = int(json.loads(data)["node_id"])
            return owners
        finally:
            await store.close()

    return trio.run(read)


def wait_bundles_settled(server: Node) -> None:
    """Until every bundle sits on the worker it ends up on.  A worker that starts more than
    cluster.handback_delay_s after the first (a loaded machine) gets its bundles by hand-backs,
    one a second (before the workers left each other their bundles while starting, that was
    every start).  Each move loads the bundle's coordinator and RocketMQ logs and sends the
    RocketMQ clients elsewhere; a run that overlaps the moves measures them, not the shape."""
    bundles = cluster_layout(Config(), server.workers).bundles
    target = {b: target_broker(b, list(range(server.workers))) for b in range(bundles)}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if bundle_owners(server.data_dir) == target:
            return
        time.sleep(0.5)
    raise RuntimeError(f"bundles did not settle on {target}")


def create_spread_topic(server: Node, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    if server.workers > 1:
        wait_bundles_settled(server)
    settled = settled_leaders(topic, server.workers)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # every partition on the worker it ends up on
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        if [partitions[p].leader for p in range(PARTITIONS)] == settled:
            time.sleep(2)  # the last move's new ledger and the clients' first connections
            return
        time.sleep(0.5)
    raise RuntimeError(f"{topic}'s partitions did not settle on {settled}")


def measured(server: Node, label: str, count: int, run: Callable[[], float], repeat: int
             ) -> tuple[float, float]:  # fmt: skip
    """Median msg/s of `repeat` runs and the node's CPU us/msg; prints each run's split."""
    rates, cpu = [], []
    for _ in range(repeat):
        pids = server.pids()
        before, client_before = process_cpu(pids), client_cpu()
        rates.append(run())
        after, client_after = process_cpu(pids), client_cpu()
        per = {name: (after[name] - before[name]) * 1e6 / count for name in pids}
        cpu.append(sum(per.values()))
        client = (client_after - client_before) * 1e6 / count
        # cores busy while it ran: (node + client CPU per message) x msg/s
        print(f"    {label}: {rates[-1]:,.0f} msg/s, node {cpu[-1]:.1f} us CPU/msg ("
              + ", ".join(f"{name} {us:.1f}" for name, us in per.items())
              + f"), client {client:.1f}; cores used: node {cpu[-1] * rates[-1] / 1e6:.2f} + "
              f"client {client * rates[-1] / 1e6:.2f} of {os.cpu_count()}; load "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    return statistics.median(rates), statistics.median(cpu)


def run_shape(workers: int, count: int, repeat: int, sends: int = 0,
              bookies_process: bool = False) -> dict[str, float]:
    """Figures of one shape; `sends` RocketMQ sends too when not 0."""
    rocketmq = sends > 0
    with node(workers, rocketmq, bookies_process) as server:
        topic = "bench-workers"
        create_spread_topic(server, topic)
        produce, produce_cpu = measured(server, "produce", count, partial(
            produce_throughput, server.bootstrap, topic, PARTITIONS, count), repeat)
        consume, consume_cpu = measured(server, "consume", count, partial(
            consume_throughput, server.bootstrap, topic, PARTITIONS, count,
            CONSUMER_CONF), repeat)
        figures = {"produce": produce, "produce_cpu": produce_cpu, "consume": consume,
                   "consume_cpu": consume_cpu}
        if rocketmq:
            from bench_rocketmq import send_run

            ns = f"127.0.0.1:{server.name_server_port}"
            figures["send8"], figures["send8_cpu"] = measured(
                server, "RocketMQ send", sends, lambda: send_run(ns, topic, sends, 8)[0],
                repeat)
    shape = f"--workers {workers}" + (" (bookies process)" if bookies_process else "")
    print(f"  {shape}: produce {produce:,.0f} msg/s ({produce_cpu:.0f} us CPU/msg), "
          f"consume {consume:,.0f} msg/s ({consume_cpu:.0f} us CPU/msg)"
          + (f", RocketMQ 8-thread sends {figures['send8']:,.0f} msg/s "
             f"({figures['send8_cpu']:.0f} us CPU/msg)" if rocketmq else ""), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rocketmq", action="store_true",
                        help="also RocketMQ sends from 8 threads of the C++ client")
    parser.add_argument("--sends", type=int, default=5_000,
                        help="RocketMQ sends per run (each is one synchronous round trip)")
    parser.add_argument("--bookies-process", action="store_true",
                        help="also the N-worker node with its bookies in one process")
    args = parser.parse_args()
    print(f"{args.messages} x 1 KB over {PARTITIONS} partitions, acks=all, fsync on; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    one = run_shape(1, args.messages, args.repeat, args.rocketmq and args.sends)
    many = run_shape(args.workers, args.messages, args.repeat, args.rocketmq and args.sends)
    shapes = [("", many)]
    if args.bookies_process:
        shapes.append((" (bookies process)", run_shape(
            args.workers, args.messages, args.repeat, args.rocketmq and args.sends, True)))
    for label, many in shapes:
        report(args, label, one, many)


def report(args: argparse.Namespace, label: str, one: dict[str, float],
           many: dict[str, float]) -> None:
    print(f"ratio --workers {args.workers}{label} / --workers 1: produce "
          f"{many['produce'] / one['produce']:.2f}x, consume "
          f"{many['consume'] / one['consume']:.2f}x; node CPU per message: produce "
          f"{many['produce_cpu'] / one['produce_cpu']:.2f}x, consume "
          f"{many['consume_cpu'] / one['consume_cpu']:.2f}x")
    if args.rocketmq:
        print(f"RocketMQ 8-thread sends{label}: {many['send8'] / one['send8']:.2f}x, node CPU per "
              f"message {many['send8_cpu'] / one['send8_cpu']:.2f}x; load "
              f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
