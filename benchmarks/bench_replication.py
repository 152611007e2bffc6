"""Geo-replication throughput against local produce, and end-to-end replication lag.

    .venv/bin/python benchmarks/bench_replication.py [--messages 50000] [--rate-mb 20]
                                                     [--seconds 10] [--source CHECKOUT]
                                                     [--profile DIR]

Two `ledgerwire standalone` processes ("east", "west") on this machine replicate a namespace
both ways (tests/replication/geo_pair.py sets them up), 1 KB values, 2 partitions:

1. local produce: with west stopped, confluent-kafka produces --messages to east (acks=all,
   linger.ms=5); the rate is east's local produce throughput (its replicator only retries).
2. replication: west starts; the time from then until east's replicators report an empty
   backlog gives the replication throughput of that backlog (west's start-up excluded: the
   clock starts when west accepts connections), and the time from east's first acknowledged
   send to the empty backlog the rate while replicating (the difference is the replicators'
   reconnection: their retry back-off while west was away).  The ratio of the rates is the
   figure to quote (both from this one run); beside each rate, the CPU of each broker process
   per message (user + system, /proc: load on a shared machine disturbs it far less than the
   rates).
3. lag: a producer sends at --rate-mb MB/s to east for --seconds while a consumer on west reads
   the replicated records; lag = arrival in west - the record's timestamp (set by the producer
   in east, kept by replication); p50 / p99 printed.  A consumer on east reads the same records
   meanwhile: its lag (arrival in east) is what the producer and east take before replication
   starts, so the difference is replication's share; each broker's CPU per message of this
   phase is printed beside it (a rate that falls behind with CPU per message unchanged is the
   machine's CPU, not a wait in the replicator, which is woken by each durable append).
   Two timelines help tell a stall from a rate that falls short: the worst lag in west of the
   records sent in each second, and what east's replicators sent (and their backlog) in each
   second (GET /admin/v1/replication every 0.25 s).

--profile DIR writes py-spy samples (collapsed stacks, `py-spy record --format raw`) of east
during local produce and of both brokers during the replication and lag phases.  Both
brokers' WARNING lines (the last ten) are printed at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.standalone import Standalone

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.replication.geo_pair import (  # noqa: E402
    PARTITIONS,
    TOPIC,
    drained,
    start_pair,
    status,
)

VALUE = os.urandom(1024)
PRODUCER_CONF = {"acks": "all", "linger.ms": 5, "batch.size": 131072}


def cpu_seconds(server: Standalone) -> float:
    """User + system CPU seconds of the broker process so far (0.0 where /proc is missing)."""
    assert server.proc is not None
    try:
        fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profile(server: Standalone, out: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the broker process into `out` (collapsed stacks), until stopped."""
    if out is None:
        return None
    assert server.proc is not None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(server.proc.pid), "--nonblocking",
                             "--format", "raw", "--rate", "200", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def produce_burst(bootstrap: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value=VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def _tail_consumer(bootstrap: str) -> Consumer:
    """A consumer at the end of each partition of the topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lag",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    ends = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10,
                                           cached=False)[1] for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(TOPIC, p, ends[p]) for p in range(PARTITIONS)])
    return consumer


def _arrivals(consumer: Consumer, stop: threading.Event, lags: list[float]) -> None:
    """Arrival - timestamp of every record of east's own producer until `stop`."""
    while not stop.is_set():
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None and msg.headers() is None:  # not a replicated one
                lags.append(time.time() - msg.timestamp()[1] / 1000.0)
    consumer.close()


def measure_lag(east_bootstrap: str, west_bootstrap: str, rate_mb: float,
                seconds: float) -> tuple[list[float], list[float], int]:
    """(lags in west, lags in east, records sent)."""
    consumer = _tail_consumer(west_bootstrap)
    local_lags: list[float] = []
    local_done = threading.Event()
    local = threading.Thread(target=_arrivals, args=(_tail_consumer(east_bootstrap),
                                                     local_done, local_lags))
    local.start()
    lags: list[float] = []
    sent_at: list[float] = []
    stop = threading.Event()
    sent = [0]

    def send() -> None:
        producer = Producer({"bootstrap.servers": east_bootstrap, **PRODUCER_CONF})
        per_second = rate_mb * 1024 * 1024 / len(VALUE)
        start = time.time()
        while time.time() - start < seconds:
            due = int((time.time() - start) * per_second)
            while sent[0] < due:
                try:
                    producer.produce(TOPIC, value=VALUE, partition=sent[0] % PARTITIONS,
                                     timestamp=int(time.time() * 1000))
                    sent[0] += 1
                except BufferError:
                    producer.poll(0.005)
            producer.poll(0.001)
        producer.flush(60)
        stop.set()

    thread = threading.Thread(target=send)
    thread.start()
    idle_after_stop = 0
    while len(lags) < sent[0] or not stop.is_set():
        batch = consumer.consume(1000, 0.2)
        now = time.time()
        for msg in batch:
            if msg.error() is None:
                lags.append(now - msg.timestamp()[1] / 1000.0)
                sent_at.append(msg.timestamp()[1] / 1000.0)
        if stop.is_set():
            idle_after_stop = 0 if batch else idle_after_stop + 1
            if idle_after_stop > 150:  # 30 s without a record after the producer finished
                break
    thread.join()
    consumer.close()
    local_done.set()
    local.join()
    print("  worst lag in west per second sent (ms): "
          + _timeline(list(zip(sent_at, lags, strict=True))))
    return lags, local_lags, sent[0]


def _timeline(lags: list[tuple[float, float]]) -> str:
    """The worst lag of the records sent in each second of the phase."""
    if not lags:
        return ""
    first = min(sent for sent, _ in lags)
    worst: dict[int, float] = {}
    for sent, lag in lags:
        second = int(sent - first)
        worst[second] = max(worst.get(second, 0.0), lag)
    return " ".join(f"{worst[s] * 1000:.0f}" for s in sorted(worst))


def watch_replicators(server: Standalone, stop: threading.Event,
                      samples: list[tuple[float, int, int, str]]) -> None:
    """(time, records sent, backlog, errors) of the server's replicators every 0.25 s."""
    while not stop.wait(0.25):
        try:
            rows = status(server)
        except OSError:
            continue
        samples.append((time.time(), sum(r["sent_total"] for r in rows),
                        sum(r["backlog_messages"] for r in rows),
                        "; ".join(sorted({r["last_error"] for r in rows if r["last_error"]}))))


def _sent_timeline(samples: list[tuple[float, int, int, str]]) -> str:
    """Records sent (and the backlog) per second from the replicators' status samples."""
    if len(samples) < 2:
        return "no samples"
    start, base = samples[0][0], samples[0][1]
    per: dict[int, tuple[int, int]] = {}
    for t, total, backlog, _ in samples:
        per[int(t - start)] = (total, backlog)
    out, previous = [], base
    for second in sorted(per):
        total, backlog = per[second]
        out.append(f"{(total - previous) / 1000:.1f}k/{backlog / 1000:.1f}k")
        previous = total
    errors = sorted({e for *_, e in samples if e} - {samples[0][3]})  # new in the phase
    return " ".join(out) + (f"; errors: {errors}" if errors else "")


def _warnings(server: Standalone) -> list[str]:
    return [line for line in server.log().splitlines()
            if "WARNING" in line or "ERROR" in line or "Traceback" in line][-10:]


def _percentiles(lags: list[float]) -> str:
    if not lags:
        return "no record"
    lags = sorted(lags)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return (f"p50 {statistics.median(lags) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {lags[-1] * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rate-mb", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--source", type=Path, default=None,
                        help="run both standalones from this checkout (e.g. a git worktree of "
                             "the parent commit, to compare a change with it)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write py-spy samples (collapsed stacks) of both brokers in the "
                             "replication and lag phases to this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        east, west = start_pair(Path(tmp), source=args.source)
        print(f"standalones from {args.source or 'this checkout'}")
        try:
            west.stop()
            n = args.messages
            cpu_east = cpu_seconds(east)
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
            spy = start_profile(east, args.profile and args.profile / "east-local.txt")
            local_s = produce_burst(east.bootstrap, n)
            stop_profile(spy)
            local_cpu = (cpu_seconds(east) - cpu_east) / n * 1e6
            mb = n * len(VALUE) / 1e6
            print(f"local produce to east: {n} x 1 KB in {local_s:.2f} s = "
                  f"{n / local_s:,.0f} msg/s, {mb / local_s:.1f} MB/s "
                  f"(east CPU {local_cpu:.0f} us/msg)")
            west.start()
            spies = [start_profile(server, args.profile and args.profile / f"{name}-drain.txt")
                     for server, name in ((east, "east"), (west, "west"))]
            cpu_east, cpu_west = cpu_seconds(east), cpu_seconds(west)
            start = time.perf_counter()
            first_sent = None
            while not drained(east):
                if first_sent is None and any(r["sent_total"] for r in status(east)):
                    first_sent = time.perf_counter()
                if time.perf_counter() - start > 600:
                    raise AssertionError("the backlog did not drain in 600 s")
                time.sleep(0.02 if first_sent is None else 0.2)
            end = time.perf_counter()
            for spy in spies:
                stop_profile(spy)
            repl_s = end - start
            sending_s = end - (first_sent or start)
            sender_cpu = (cpu_seconds(east) - cpu_east) / n * 1e6
            receiver_cpu = (cpu_seconds(west) - cpu_west) / n * 1e6
            print(f"replication east -> west of that backlog: {repl_s:.2f} s = "
                  f"{n / repl_s:,.0f} msg/s, {mb / repl_s:.1f} MB/s "
                  f"(east CPU {sender_cpu:.0f} us/msg sending, west {receiver_cpu:.0f} "
                  f"us/msg receiving)")
            print(f"  of which {repl_s - sending_s:.2f} s before the first acknowledged send; "
                  f"from it: {n / sending_s:,.0f} msg/s, {mb / sending_s:.1f} MB/s")
            print(f"ratio: replication {local_s / repl_s:.2f}x local produce (same run); "
                  f"{local_s / sending_s:.2f}x from the first send")
            cpu_east, cpu_west = cpu_seconds(east), cpu_seconds(west)
            spies = [start_profile(server, args.profile and args.profile / f"{name}-lag.txt")
                     for server, name in ((east, "east"), (west, "west"))]
            watched: list[tuple[float, int, int, str]] = []
            watching = threading.Event()
            watcher = threading.Thread(target=watch_replicators, args=(east, watching, watched))
            watcher.start()
            try:
                lags, local_lags, sent = measure_lag(east.bootstrap, west.bootstrap,
                                                     args.rate_mb, args.seconds)
            finally:
                watching.set()
                watcher.join()
            print(f"  east's replicators, sent/backlog per second: {_sent_timeline(watched)}")
            for spy in spies:
                stop_profile(spy)
            achieved = sent * len(VALUE) / 1e6 / args.seconds
            if lags:
                print(f"lag at {args.rate_mb:g} MB/s offered ({achieved:.1f} MB/s sent, "
                      f"{len(lags)}/{sent} records seen in west): {_percentiles(lags)}")
                print(f"  the same records' arrival in east's own consumer: "
                      f"{_percentiles(local_lags)}; CPU in this phase: east "
                      f"{(cpu_seconds(east) - cpu_east) / sent * 1e6:.0f} us/msg, west "
                      f"{(cpu_seconds(west) - cpu_west) / sent * 1e6:.0f} us/msg")
            else:
                print("lag: no replicated record arrived")
        finally:
            east.stop()
            west.stop()
            for server, name in ((east, "east"), (west, "west")):
                for line in _warnings(server):
                    print(f"  {name}: {line[:300]}")


if __name__ == "__main__":
    main()
