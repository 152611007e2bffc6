"""Many partitions on one standalone: create, first write, Metadata, RSS, restart (issue 16).

    .venv/bin/python benchmarks/bench_partitions.py [--topics 1000] [--partitions 10]
        [--workers 1] [--batch 100] [--write-sample N] [--churn TOPICS]
        [--write-all-once] [--max-open N] [--idle-unload S] [--one-producer]

A real `ledgerwire standalone` (fsync on, RocketMQ off) on loopback, driven by confluent-kafka:

1. create TOPICS x PARTITIONS partitions, BATCH topics per CreateTopics request;
2. first write: one 100-byte record to every partition (acks=all, 1,000 partitions at a
   time), i.e. every partition's log is opened (managed ledger, ledger, partition state) --
   the figure to compare is the node's CPU per partition of this round against round 3;
3. second write: the same again, every log already open (the steady-state cost of a record);
4. a full Metadata request (every topic) on a raw socket: wall time to its last byte and the
   node's CPU for it (and once through confluent-kafka's list_topics, whose Python objects
   cost the client seconds at 100k partitions);
5. the node's RSS (sum over its processes);
6. restart (SIGTERM, start): time until the Kafka port answers Metadata for every topic, and a
   third write round (every log reopened: fencing/recovery of the previous ledgers);
7. with --churn N: N one-partition topics created, written once and deleted, in rounds of
   N/5, the node's RSS after each round (a client test suite's churn: RSS must not keep
   growing).

--data-dir D --phase load runs 1-5 and keeps the node's data in D; --phase restart then
starts a node on it (same ports) and runs 6-7: a 100k run in two runs of a few minutes each
(a measuring window each).

--write-sample N writes rounds 2, 3 and 6 to N partitions only (every partition of
the first N/P topics, the last with --write-all-once): at 100,000 partitions a full write round
is minutes of the machine.
--write-deadline S ends round 2 after the wave that passes S seconds (a measuring window's
share) and prints how many partitions it wrote.
--write-all-once writes round 2 (the first write) to every partition all the same, so every
partition is opened once: with --max-open N (`[storage] max_open_partitions`) the node closes
the least recently used beyond N (gateway/topics/idle_unloader.py) and its RSS is printed with
all of them written; --idle-unload S sets `[storage] partition_idle_unload_s`.  The unloads the
node logged are counted after each phase.

Each wave of 1,000 partitions is written by a producer of its own (write_round says why);
--one-producer writes a whole round through one, as before.

Printed: partitions/s and node CPU per partition for each phase (the client's CPU beside it),
the first-write cost minus the steady write cost (what opening a partition costs), Metadata
seconds, RSS, restart seconds.  The clients share the cores with the node: wall-clock rates on
a loaded machine are lower bounds; CPU per partition is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_workers import Node, client_cpu, process_cpu  # noqa: E402

from protocols.kafka.codec import RequestHeader, decode_response, encode_request  # noqa: E402


def rss_mb(pids: dict[str, int]) -> float:
    """Resident memory of every process of the node, MB."""
    total = 0
    for pid in pids.values():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024



def node_cpu(pids: dict[str, int]) -> float:
    """CPU seconds so far of every process of the node."""
    return sum(process_cpu(pids).values())

def create_topics(server: Node, names: list[str], partitions: int, batch: int) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for start in range(0, len(names), batch):
        chunk = [NewTopic(n, partitions, 1) for n in names[start:start + batch]]
        for future in admin.create_topics(chunk, request_timeout=300).values():
            future.result(300)


PRODUCER_CONF = {"acks": "all", "linger.ms": 20, "message.timeout.ms": 600_000,
                 "queue.buffering.max.messages": 2_000_000,
                 "topic.metadata.refresh.interval.ms": 600_000}


def write_round(server: Node, names: list[str], partitions: int, wave: int = 1000,
                deadline: float | None = None, one_producer: bool = False,
                on_wave: Callable[[int], None] | None = None) -> int:
    """One record to every partition, `wave` partitions at a time (all at once, librdkafka
    times out requests queued behind thousands of opens on a loaded machine); with `deadline`
    (a perf_counter time) no new wave starts after it.  Returns the partitions written.

    Each wave has a producer of its own, as a node's 100,000 partitions are written by many
    clients: one librdkafka producer's CPU grows with every partition it has written to (it
    keeps and walks them all), from 0.05 s per 1,000 first writes to ~2 s by the 34,000th
    (measured), and that client, on the node's two cores, made the node's CPU per partition
    look as if it grew with the count (0.5 -> 1.3 ms; with a producer per wave 0.5 -> 0.8 ms
    in the same conditions).  `one_producer` (--one-producer) keeps the old way.  `on_wave`
    is called with the partitions written so far after each wave."""
    failed = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    def new_producer() -> Producer:
        return Producer({"bootstrap.servers": server.bootstrap, **PRODUCER_CONF})

    value = b"v" * 100
    queued = 0
    producer = new_producer()
    for name in names:
        for p in range(partitions):
            producer.produce(name, value, partition=p, on_delivery=report)
            queued += 1
            if queued % wave == 0:
                if producer.flush(900):
                    raise RuntimeError(f"a wave of {wave} not delivered in 900 s")
                if on_wave is not None:
                    on_wave(queued)
                if not one_producer:
                    producer = new_producer()
        producer.poll(0)
        if deadline is not None and queued % wave == 0 and time.perf_counter() > deadline:
            break
    left = producer.flush(900)
    if left or failed:
        raise RuntimeError(f"{left} unflushed, {len(failed)} failed: {failed[:3]}")
    return queued


class CpuByStep:
    """The node's CPU per partition over each `step` partitions of a write round (on_wave):
    whether a first write costs more as more partitions have been written."""

    def __init__(self, server: Node, step: int) -> None:
        self.server, self.step = server, max(1, step)
        self.marks = [(0, node_cpu(server.pids()))]

    def note(self, written: int) -> None:
        if written - self.marks[-1][0] >= self.step:
            self.marks.append((written, node_cpu(self.server.pids())))

    def line(self) -> str:
        costs = [(c1 - c0) * 1000 / (w1 - w0)
                 for (w0, c0), (w1, c1) in zip(self.marks, self.marks[1:], strict=False)]
        return (f"node CPU per partition by {self.step:,} written: "
                + " ".join(f"{c:.2f}" for c in costs) + " ms")


def churn(server: Node, topics: int, rounds: int = 5) -> None:
    """Create, write once and delete `topics` one-partition topics in `rounds` rounds."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    per_round = max(1, topics // rounds)
    print(f"  churn: node RSS {rss_mb(server.pids()):,.0f} MB before", flush=True)
    for r in range(rounds):
        names = [f"churn-{r}-{i:05d}" for i in range(per_round)]
        create_topics(server, names, 1, 100)
        write_round(server, names, 1)
        for start in range(0, len(names), 100):
            for future in admin.delete_topics(names[start:start + 100],
                                              request_timeout=300).values():
                future.result(300)
        print(f"  churn round {r + 1}: {per_round * (r + 1):,} topics created, written and "
              f"deleted; node RSS {rss_mb(server.pids()):,.0f} MB", flush=True)


def metadata_wire(server: Node, expected: int, version: int = 12) -> str:
    """One Metadata request for every topic on a raw socket: seconds until its last byte and
    the node's CPU for it (confluent-kafka's list_topics adds seconds of Python objects per
    100k partitions on the client side, which is not the broker's time)."""
    host, port = server.bootstrap.rsplit(":", 1)
    header = RequestHeader(api_key=3, api_version=version, correlation_id=1, client_id="bench")
    frame = encode_request(header, {"topics": None, "allow_auto_topic_creation": False})
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        cpu_before, started = node_cpu(server.pids()), time.perf_counter()
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = bytearray()
        while len(body) < size:
            body += sock.recv(size - len(body))
        wall = time.perf_counter() - started
        cpu = node_cpu(server.pids()) - cpu_before
    _, answer = decode_response(3, version, bytes(body))
    count = sum(len(t["partitions"]) for t in answer["topics"] if t["name"].startswith("bp-"))
    if count != expected:
        raise RuntimeError(f"Metadata listed {count} partitions, expected {expected}")
    return f"{wall:.2f} s on the wire ({cpu:.2f} s node CPU, {size / 1e6:.1f} MB)"


def metadata_seconds(server: Node, expected: int) -> float:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    started = time.perf_counter()
    listed = admin.list_topics(timeout=120)
    took = time.perf_counter() - started
    count = sum(len(t.partitions) for n, t in listed.topics.items() if n.startswith("bp-"))
    if count != expected:
        raise RuntimeError(f"Metadata listed {count} partitions, expected {expected}")
    return took


def unloaded(server: Node) -> int:
    """Partition logs the node closed as idle or over max_open_partitions so far (its log)."""
    return sum(int(n) for n in re.findall(r"unloaded (\d+) idle partition logs",
                                           server.log_path.read_text(errors="replace")))


def phase(server: Node, label: str, count: int, run: object) -> tuple[float, float]:
    pids = server.pids()
    cpu_before, client_before, started = node_cpu(pids), client_cpu(), time.perf_counter()
    run()  # type: ignore[operator]
    wall = time.perf_counter() - started
    cpu_ms = (node_cpu(server.pids()) - cpu_before) * 1000 / count
    print(f"  {label}: {count / wall:,.0f} partitions/s ({wall:.1f} s), node CPU "
          f"{cpu_ms:.2f} ms/partition (client {(client_cpu() - client_before) * 1000 / count:.2f})",
          flush=True)
    return wall, cpu_ms


PORTS = ("kafka_port", "bookie_port", "admin_port", "name_server_port",
         "rocketmq_broker_port", "rocketmq_grpc_port")


def keep_ports(server: Node, data: Path) -> None:
    """A kept data directory is restarted on the same ports (the ledgers' ensembles name the
    bookie by its address): saved beside it by the load phase, read back by the restart one."""
    saved = data.parent / "bench-partitions-ports.json"
    if saved.exists():
        for name, port in json.loads(saved.read_text()).items():
            setattr(server, name, port)
    else:
        saved.write_text(json.dumps({name: getattr(server, name) for name in PORTS}))


def load_phase(server: Node, args: argparse.Namespace, names: list[str], total: int,
               first_names: list[str], first_written: int, sample: list[str],
               written: int) -> None:
    phase(server, "create", total,
          lambda: create_topics(server, names, args.partitions, args.batch))
    print(f"  Metadata of every topic (none open): "
          f"{metadata_wire(server, total)}, again {metadata_wire(server, total)}; "
          f"confluent-kafka list_topics {metadata_seconds(server, total):.2f} s; "
          f"node RSS {rss_mb(server.pids()):,.0f} MB", flush=True)
    steps = CpuByStep(server, max(1000, first_written // 10 // 1000 * 1000))
    if args.write_deadline:  # a measuring window's share: as many first writes as fit
        started, cpu_before = time.perf_counter(), node_cpu(server.pids())
        client_before = client_cpu()
        first_written = write_round(server, first_names, args.partitions,
                                    deadline=started + args.write_deadline,
                                    one_producer=args.one_producer, on_wave=steps.note)
        wall = time.perf_counter() - started
        first = (node_cpu(server.pids()) - cpu_before) * 1000 / first_written
        client = (client_cpu() - client_before) * 1000 / first_written
        print(f"  first write (opens), stopped after {args.write_deadline:.0f} s: "
              f"{first_written:,} of {total:,} partitions written, {first_written / wall:,.0f} "
              f"partitions/s ({wall:.1f} s), node CPU {first:.2f} ms/partition (client "
              f"{client:.2f})", flush=True)
    else:
        _, first = phase(server, "first write (opens)", first_written,
                         lambda: write_round(server, first_names, args.partitions,
                                             one_producer=args.one_producer,
                                             on_wave=steps.note))
    print(f"  first write, {steps.line()}", flush=True)
    print(f"  after the first write: node RSS {rss_mb(server.pids()):,.0f} MB, "
          f"{unloaded(server):,} partition logs unloaded so far", flush=True)
    _, again = phase(server, "second write (open)", written,
                     lambda: write_round(server, sample, args.partitions,
                                         one_producer=args.one_producer))
    print(f"  opening a partition: {first - again:.2f} ms node CPU "
          f"(first write minus second; {unloaded(server):,} unloaded so far)", flush=True)
    print(f"  Metadata of every topic: {metadata_wire(server, total)}, again "
          f"{metadata_wire(server, total)}; node RSS {rss_mb(server.pids()):,.0f} MB; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)


def restart_phase(server: Node, args: argparse.Namespace, total: int, sample: list[str],
                  written: int, started: float, *, restarted: bool) -> None:
    """`server` was just started (at perf_counter `started`) on the data directory."""
    ready_cpu = node_cpu(server.pids())  # new processes: all their CPU so far
    listed = metadata_wire(server, total)
    print(f"  {'restart' if restarted else 'start on the kept data'}: ready and listing every "
          f"topic in {time.perf_counter() - started:.1f} s, node CPU {ready_cpu:.1f} s to ready "
          f"(that first Metadata, cold: {listed}; again {metadata_wire(server, total)})",
          flush=True)
    print(f"  node RSS {rss_mb(server.pids()):,.0f} MB after the restart", flush=True)
    phase(server, "write after restart (reopens)", written,
          lambda: write_round(server, sample, args.partitions,
                              one_producer=args.one_producer))
    print(f"  node RSS {rss_mb(server.pids()):,.0f} MB; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    if args.churn:
        churn(server, args.churn)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--write-sample", type=int, default=0,
                        help="write rounds go to this many partitions only (0: all)")
    parser.add_argument("--churn", type=int, default=0,
                        help="topics to create, write and delete at the end (0: none)")
    parser.add_argument("--write-all-once", action="store_true",
                        help="the first write round goes to every partition")
    parser.add_argument("--write-deadline", type=float, default=0,
                        help="stop the first write round's new waves after this many seconds "
                             "and report how many partitions it wrote (0: write them all)")
    parser.add_argument("--one-producer", action="store_true",
                        help="one producer for a whole write round (before: its CPU grows "
                             "with the partitions it wrote; default: one per 1,000)")
    parser.add_argument("--max-open", type=int, default=0,
                        help="[storage] max_open_partitions of the node (0: no bound)")
    parser.add_argument("--idle-unload", type=float, default=None,
                        help="[storage] partition_idle_unload_s of the node")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep the node's data here (default: a temporary directory)")
    parser.add_argument("--phase", choices=("all", "load", "restart"), default="all",
                        help="load: create and write, then stop; restart: start on the kept "
                             "--data-dir (its load phase's), Metadata, write, churn")
    args = parser.parse_args()
    if args.phase != "all" and args.data_dir is None:
        parser.error("--phase load/restart need --data-dir (kept between the two runs)")
    names = [f"bp-{i:06d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    sample = names
    if args.write_sample:
        count = max(1, args.write_sample // args.partitions)
        # after a write to all, the last written are the ones still open under --max-open
        sample = names[-count:] if args.write_all_once else names[:count]
    written = len(sample) * args.partitions
    first_names = names if args.write_all_once else sample
    first_written = len(first_names) * args.partitions
    print(f"{args.topics} topics x {args.partitions} partitions = {total:,}, "
          f"--workers {args.workers}, fsync on, phase {args.phase}, first write to "
          f"{first_written:,}, other write rounds to {written:,}, max_open_partitions "
          f"{args.max_open}; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.data_dir.resolve() if args.data_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        server = Node(root / "data", args.workers)
        keep_ports(server, root / "data")
        storage = [f"max_open_partitions = {args.max_open}"]
        if args.idle_unload is not None:
            storage.append(f"partition_idle_unload_s = {args.idle_unload}")
        config = root / "bench-partitions.toml"
        config.write_text("[storage]\n" + "\n".join(storage) + "\n")
        server.extra_args += ["--config", str(config)]
        started = time.perf_counter()
        server.start(600)
        try:
            if args.phase in ("all", "load"):
                load_phase(server, args, names, total, first_names, first_written, sample,
                           written)
            if args.phase == "all":
                server.stop(600)
                started = time.perf_counter()
                server.start(600)
            if args.phase in ("all", "restart"):
                restart_phase(server, args, total, sample, written, started,
                              restarted=args.phase == "all")
        finally:
            server.stop(600)


if __name__ == "__main__":
    main()
