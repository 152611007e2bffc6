"""Chaos trials on real loopback clusters: faults during acknowledged, idempotent produce.

Two topologies (`--topology`), each one cluster (ZooKeeper, 2 brokers, bookies at E=3 Qw=2
Qa=2) serving all its trials:

  spare     4 bookies: a failed bookie is replaced at once;
  no-spare  3 bookies, E equal to the bookie count: a failed bookie cannot be replaced, adds
            wait for it to return (storage errors must reach clients as retriable codes).

A trial produces to a fresh topic with confluent-kafka (idempotent, acks=all) while a consumer
group member reads it, and once a few hundred messages are acknowledged injects one fault (the
faults take turns, so a short run covers each):

  kill-broker     SIGKILL a random broker, restart it after a random pause;
  stop-owner      SIGSTOP the owner of partition 0 past its ZooKeeper session, then SIGCONT;
  kill-bookie     SIGKILL a random bookie, restart it (same data dir) after a random pause;
  restart-broker  SIGTERM a random broker (graceful), start it again.

Every trial starts on a settled cluster: each bundle owned by the broker rendezvous hashing
gives it (`wait_settled`), so a restarted broker's delayed hand-back (15 s after it returns)
does not land in the next trial's measurement (in session 6 it did, in every bookie-kill
trial, which follows a SIGSTOP trial: 7-9 bundles handed back during each).

It keeps producing until as many messages again are acknowledged after the fault, reads the
topic back and counts: acknowledged messages missing (lost), messages stored more than once
(duplicated), deliveries that failed by error code, failed deliveries that were stored anyway
(failed-but-stored), tracebacks that appeared in any process log, the resume time (the longest
time any partition went without an acknowledgement after the fault; beside it the longest
such pause in the 5 s before the fault, which is what the machine's load alone costs) and
rebalances the consumer group member saw.
Prints one line per trial, a summary per topology, then the totals as

    trials, acked, lost, duplicated
    N, A, L, D

The producer keeps librdkafka's default request.timeout.ms (30 s), longer than any pause here.
With a request timeout shorter than a pause, librdkafka gives up on the in-flight request,
bumps the producer epoch and re-sends the messages under new sequence numbers; a message the
paused owner had already stored (but not acknowledged) is then stored twice — the client, not
the broker, has dropped the sequence that would have caught it.

With --rocketmq the brokers also serve RocketMQ and each trial runs, beside the Kafka producer,
the official RocketMQ C++ client (rocketmq-client-python) sending synchronously to a topic of its
own through both name servers; its line and the summary add acked, lost, duplicated, failed by
kind, failed-but-stored and resume (the longest any queue went without an acknowledged send).
A lost RocketMQ message fails the run; a duplicate is reported only (RocketMQ 4.x sends are at
least once: the C++ client resends a send that failed or timed out to another queue under a new
message id (UNIQ_KEY), so the broker cannot tell the resend from a new message; read back from
the bookies, a session-6 duplicate was one value in queues 0, 1 and 2 with three ids).

With --java each trial also runs Apache Kafka's Java producer (kafka-clients 4.x with its
defaults: idempotent, acks=all; tests/java/ChaosProduce.java) on a topic of its own at 100/s;
its line adds acked, lost, duplicated, failed by exception, failed-but-stored and resume, and
its lost or duplicated messages count against the run like confluent-kafka's.

A broker-kill trial also prints its steps, read from the survivor's log: kill -> take-over
(its first bundle acquired: since session 10 the survivor expels a broker whose Kafka port
refuses connections, about 1 s after the kill, gateway/cluster/peer_liveness.py; without that,
or when the restarted broker bound the port first, the ZooKeeper session, rounded up to
ZooKeeper's tick, and the reconcile), -> the trial topic's partitions open (fenced,
recovered), -> served (the resume);
the summary gives their medians.  --zk-tick-ms sets ZooKeeper's tickTime (200 ms; a session
ends at the first tick past its timeout, so session 8's 500 ms added up to 0.5 s).

When a trial stored a value twice, the values and their partition:offset places are printed.
--faults picks the faults that take turns (e.g. only restart-broker, to chase one case);
--no-settle skips the wait for a settled cluster (the short test in the suite uses it).

Usage: python benchmarks/chaos.py --trials 30 [--topology spare,no-spare] [--seed 1] [--base DIR]
                                  [--rocketmq] [--java] [--faults kill-bookie,...]
                                  [--zk-tick-ms 200]
Exit status 1 if anything was lost or duplicated, or a trial could not finish.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from gateway.cluster.bundle_placement import target_broker  # noqa: E402
from tests.cluster.cluster_processes import Cluster  # noqa: E402
from tests.cluster.java_workload import JavaProduceRun  # noqa: E402
from tests.cluster.kafka_workload import (  # noqa: E402
    ProduceRun,
    create_topic,
    read_topic,
    verify,
)
from tests.cluster.rocketmq_workload import RocketMQSendRun  # noqa: E402

PARTITIONS = 4
FAULTS = ("kill-broker", "stop-owner", "kill-bookie", "restart-broker")
TOPOLOGIES = {"spare": 4, "no-spare": 3}  # bookies; E=3 Qw=2 Qa=2 in both


@dataclass
class TrialResult:
    fault: str
    target: str
    acked: int
    lost: int
    duplicated: int
    gaps: int
    failed_by_code: Counter[str]
    failed_but_stored: int
    tracebacks: int
    resume_s: float | None
    rebalances: int
    rocketmq: RocketMQOutcome | None = None
    java: RocketMQOutcome | None = None  # the same figures for the Java producer
    baseline_s: float | None = None  # the longest pause before the fault: the machine's noise
    # a broker kill's steps (the survivor's log): kill -> it takes the first bundle, and
    # kill -> the last of the trial topic's partitions it took is open (fenced, recovered)
    takeover_s: float | None = None
    opened_s: float | None = None


@dataclass
class RocketMQOutcome:
    acked: int
    lost: int
    duplicated: int
    failed_by_kind: Counter[str]
    failed_but_stored: int
    resume_s: float | None
    failed_after_fault: int = 0


@dataclass
class GroupMember:
    """One consumer-group member reading the topic; counts the rebalances it goes through."""

    bootstrap: str
    topic: str
    group: str
    assignments: int = 0
    revocations: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> GroupMember:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                             "heartbeat.interval.ms": 1000})

        def on_assign(c: object, partitions: object) -> None:
            self.assignments += 1

        def on_revoke(c: object, partitions: object) -> None:
            if not self._stop.is_set():  # the member's own leaving is no rebalance
                self.revocations += 1

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)
        try:
            while not self._stop.is_set():
                consumer.poll(0.2)
        finally:
            consumer.close()

    @property
    def rebalances(self) -> int:
        return max(0, self.assignments - 1) + self.revocations

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)


def longest_pause_before(times: list[float], partitions: list[int], at: float,
                         window_s: float = 5.0) -> float | None:
    """The longest time any partition went without an acknowledgement in the `window_s`
    before `at` (from 0.5 s after the first acknowledgement): what the machine's load alone
    costs, to set beside the resume time after a fault."""
    if not times:
        return None
    start = max(min(times) + 0.5, at - window_s)
    by_partition: dict[int, list[float]] = {}
    for t, partition in zip(times, partitions, strict=False):
        if start <= t < at:
            by_partition.setdefault(partition, []).append(t)
    if not by_partition:
        return None
    longest = 0.0
    for series in by_partition.values():
        previous = start
        for t in sorted(series):
            longest = max(longest, t - previous)
            previous = t
        longest = max(longest, at - previous)
    return longest


def wait_acks(run: ProduceRun, count: int, since: float, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while run.acked_since(since) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def heal(cluster: Cluster, settle: bool = True) -> None:
    """Every process alive and registered again, every bundle at its broker, before the next
    trial."""
    for node_id, broker in cluster.brokers.items():
        if not broker.alive:
            cluster.add_broker(node_id)
    for bookie in cluster.bookies:
        if not bookie.alive:
            bookie.start()
    deadline = time.monotonic() + 60
    while len(status_retrying(cluster)["brokers"]) < len(cluster.brokers):
        if time.monotonic() > deadline:
            raise TimeoutError("a restarted broker did not register")
        time.sleep(0.3)
    cluster.wait_all_bundles_owned(timeout_s=60)
    if settle:
        wait_settled(cluster)


def wait_settled(cluster: Cluster, timeout_s: float = 60.0) -> float:
    """Wait until every bundle is owned by the broker rendezvous hashing gives it (the
    delayed hand-back to a returned broker is done), so no load-balancing hand-off lands in
    the next trial's measurement; the seconds waited."""
    started = time.monotonic()
    brokers = sorted(cluster.brokers)
    targets = {b: target_broker(b, brokers) for b in range(cluster.bundles)}
    while True:
        owners = {int(b): o for b, o in status_retrying(cluster)["bundle_owners"].items()}
        if owners == targets:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            print(f"cluster not settled after {timeout_s:.0f} s: {owners} (targets {targets})",
                  flush=True)
            return time.monotonic() - started
        time.sleep(0.5)


def status_retrying(cluster: Cluster, attempts: int = 3) -> dict:
    """`cluster status`, asked again when the CLI timed out: on a machine at load 35 one took
    over 120 s (twice in a session-6 run, each ending the run) while the cluster was fine."""
    for attempt in range(attempts - 1):
        try:
            return cluster.status()
        except subprocess.TimeoutExpired:
            print(f"cluster status timed out (attempt {attempt + 1}); asking again", flush=True)
    return cluster.status()


def create_topic_retrying(cluster: Cluster, topic: str) -> None:
    for attempt in range(5):
        try:
            create_topic(cluster.bootstrap, topic, PARTITIONS, timeout_s=15)
            return
        except Exception as exc:  # a broker still settling: ask again
            print(f"create {topic}: {exc!r}; retrying", flush=True)
            time.sleep(1.0 + attempt)
    create_topic(cluster.bootstrap, topic, PARTITIONS)


def count_tracebacks(cluster: Cluster) -> int:
    return sum(p.log_path.read_bytes().count(b"Traceback")
               for p in [*cluster.brokers.values(), *cluster.bookies] if p.log_path.exists())


LOG_TIME = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(acquired bundle|"
                      rb"public/default/(\S+)-\d+: opened)", re.M)


def takeover_steps(cluster: Cluster, topic: str, killed_at: float
                   ) -> tuple[float | None, float | None]:
    """From the brokers' logs (wall clock, ms): seconds from a broker kill at `killed_at`
    (time.time()) to the first bundle a survivor acquired, and to the last partition of
    `topic` it opened (fenced and recovered) after it."""
    takeover: float | None = None
    opened: float | None = None
    for broker in cluster.brokers.values():
        if not broker.log_path.exists():
            continue
        for m in LOG_TIME.finditer(broker.log_path.read_bytes()):
            stamp = datetime.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if stamp < killed_at:
                continue
            if m.group(2) == b"acquired bundle":
                takeover = min(takeover, stamp) if takeover is not None else stamp
            elif m.group(3) == topic.encode():
                opened = max(opened, stamp) if opened is not None else stamp
    return (takeover - killed_at if takeover is not None else None,
            opened - killed_at if opened is not None and takeover is not None else None)


def inject(cluster: Cluster, fault: str, rng: random.Random) -> str:
    if fault == "kill-broker":
        node_id = rng.choice(sorted(cluster.brokers))
        cluster.brokers[node_id].kill()
        time.sleep(rng.uniform(0.2, 3.0))
        cluster.add_broker(node_id, wait=False)
        return f"broker {node_id}"
    if fault == "restart-broker":
        node_id = rng.choice(sorted(cluster.brokers))
        cluster.brokers[node_id].stop()
        cluster.add_broker(node_id, wait=False)
        return f"broker {node_id} (SIGTERM)"
    if fault == "kill-bookie":
        bookie = rng.choice(cluster.bookies)
        bookie.kill()
        time.sleep(rng.uniform(0.2, 3.0))
        bookie.start(wait=False)
        return bookie.name
    owner = cluster.partition_owner(cluster.chaos_topic, 0)  # type: ignore[attr-defined]
    if owner is None:
        return "no owner"
    broker = cluster.brokers[owner]
    broker.signal(signal.SIGSTOP)
    time.sleep(cluster.session_timeout_s + rng.uniform(0.5, 3.0))
    broker.signal(signal.SIGCONT)
    return f"broker {owner} (stopped)"


def java_outcome(cluster: Cluster, run: JavaProduceRun, at: float) -> RocketMQOutcome:
    records = read_topic(cluster.bootstrap, run.topic, PARTITIONS, timeout_s=120)
    verdict = verify(run.acked, records)
    stored = {value for _, _, value in records}
    return RocketMQOutcome(verdict.acked, verdict.lost, verdict.duplicated,
                           Counter(run.error_codes),
                           sum(1 for value in set(run.failed) if value in stored),
                           run.longest_pause_after(at), 0)


def wait_rocketmq_acks(run: RocketMQSendRun | JavaProduceRun | None, count: int, since: float,
                       timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while run is not None and run.acked_since(since) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def rocketmq_outcome(cluster: Cluster, run: RocketMQSendRun, at: float) -> RocketMQOutcome:
    records = read_topic(cluster.bootstrap, run.topic, PARTITIONS, timeout_s=120)
    verdict = verify(run.acked, records)
    stored = {value: partition for partition, _, value in records}
    return RocketMQOutcome(verdict.acked, verdict.lost, verdict.duplicated,
                           Counter(run.error_kinds),
                           sum(1 for value in set(run.failed) if value in stored),
                           run.longest_pause_after(at, stored),
                           sum(1 for t in run.failure_times if t >= at))


def trial(cluster: Cluster, name: str, index: int, fault: str, rng: random.Random,
          batch: int, java: bool = False, settle: bool = True) -> TrialResult:  # fmt: skip
    topic = f"chaos-{name}-{index}"
    cluster.chaos_topic = topic  # type: ignore[attr-defined]
    create_topic_retrying(cluster, topic)
    rmq: RocketMQSendRun | None = None
    if cluster.rocketmq:
        create_topic_retrying(cluster, f"chaos-rmq-{name}-{index}")
    jrun: JavaProduceRun | None = None
    if java:
        create_topic_retrying(cluster, f"chaos-java-{name}-{index}")
    tracebacks_before = count_tracebacks(cluster)
    member = GroupMember(cluster.bootstrap, topic, f"g-{topic}").start()
    run = ProduceRun(cluster.bootstrap, topic, f"t{index}", rate_per_s=300).start()
    if cluster.rocketmq:
        rmq = RocketMQSendRun(";".join(cluster.name_server(i) for i in sorted(cluster.brokers)),
                              f"chaos-rmq-{name}-{index}", f"t{index}", rate_per_s=100,
                              timeout_ms=3000).start()  # the C++ client's default
    if java:
        jrun = JavaProduceRun(cluster.bootstrap, f"chaos-java-{name}-{index}", f"j{index}",
                              rate_per_s=100, log_path=cluster.base / "java.log").start()
    try:
        if not (wait_acks(run, batch, 0.0, 60) and wait_rocketmq_acks(rmq, batch // 3, 0.0, 60)
                and wait_rocketmq_acks(jrun, batch // 3, 0.0, 90)):
            raise RuntimeError(f"trial {index}: no acks before the fault: {run.errors[-3:]} "
                               f"{rmq.error_kinds if rmq else ''} "
                               f"{dict(jrun.error_codes) if jrun else ''}")
        rebalances_before = member.rebalances
        at = time.monotonic()
        wall_at = time.time()
        target = inject(cluster, fault, rng)
        if not (wait_acks(run, batch, at, 120) and wait_rocketmq_acks(rmq, batch // 3, at, 120)
                and wait_rocketmq_acks(jrun, batch // 3, at, 120)):
            raise RuntimeError(f"trial {index}: no acks after {fault}: {run.errors[-3:]} "
                               f"{rmq.error_kinds if rmq else ''} "
                               f"{dict(jrun.error_codes) if jrun else ''}")
    finally:
        run.stop()
        member.stop()
        if rmq is not None:
            rmq.stop()
        if jrun is not None:
            jrun.stop()
    # after stop(), which flushes: a partition the fault stopped counts even when the acks
    # awaited above all came from the others (before, such a partition was left out, and a
    # broker kill could show a 0.03 s resume)
    resume = run.longest_pause_after(at)
    steps = takeover_steps(cluster, topic, wall_at) if fault == "kill-broker" else (None, None)
    heal(cluster, settle)
    records = read_topic(cluster.bootstrap, topic, PARTITIONS, timeout_s=120)
    verdict = verify(run.acked, records)
    if verdict.duplicated:
        print(f"   duplicates of trial {index}: {duplicate_places(records)}", flush=True)
    stored = {value for _, _, value in records}
    return TrialResult(fault, target, verdict.acked, verdict.lost, verdict.duplicated,
                       verdict.gaps, Counter(run.error_codes),
                       sum(1 for value in set(run.failed) if value in stored),
                       count_tracebacks(cluster) - tracebacks_before, resume,
                       member.rebalances - rebalances_before,
                       rocketmq_outcome(cluster, rmq, at) if rmq is not None else None,
                       java_outcome(cluster, jrun, at) if jrun is not None else None,
                       longest_pause_before(run.ack_times, run.ack_partitions, at), *steps)


def duplicate_places(records: list[tuple[int, int, str]], shown: int = 8) -> str:
    """Where values stored more than once lie: value @ partition:offset, offset, ..."""
    places: dict[str, list[tuple[int, int]]] = {}
    for partition, offset, value in records:
        places.setdefault(value, []).append((partition, offset))
    twice = sorted((v, p) for v, p in places.items() if len(p) > 1)
    return "; ".join(f"{v} @ " + ", ".join(f"{p}:{o}" for p, o in where)
                     for v, where in twice[:shown]) + (" ..." if len(twice) > shown else "")


def show(index: int, r: TrialResult) -> None:
    resume = f"{r.resume_s:.2f}" if r.resume_s is not None else "-"
    baseline = f"{r.baseline_s:.2f}" if r.baseline_s is not None else "-"
    print(f"trial {index:3d} {r.fault:14s} {r.target:24s} acked={r.acked} lost={r.lost} "
          f"duplicated={r.duplicated} gaps={r.gaps} failed={dict(r.failed_by_code)} "
          f"failed_but_stored={r.failed_but_stored} tracebacks={r.tracebacks} "
          f"resume_s={resume} (before the fault {baseline}) rebalances={r.rebalances}", flush=True)
    if r.takeover_s is not None:
        opened = f"{r.opened_s:.2f}" if r.opened_s is not None else "-"
        print(f"          steps: kill -> take-over {r.takeover_s:.2f} s, -> partitions open "
              f"{opened} s, -> served {r.resume_s or 0:.2f} s", flush=True)
    if r.rocketmq is not None:
        q = r.rocketmq
        resume = f"{q.resume_s:.2f}" if q.resume_s is not None else "-"
        print(f"          rocketmq acked={q.acked} lost={q.lost} duplicated={q.duplicated} "
              f"failed={dict(q.failed_by_kind)} ({q.failed_after_fault} after the fault) "
              f"failed_but_stored={q.failed_but_stored} resume_s={resume}", flush=True)
    if r.java is not None:
        j = r.java
        resume = f"{j.resume_s:.2f}" if j.resume_s is not None else "-"
        print(f"          java     acked={j.acked} lost={j.lost} duplicated={j.duplicated} "
              f"failed={dict(j.failed_by_kind)} failed_but_stored={j.failed_but_stored} "
              f"resume_s={resume}", flush=True)


def summarize(name: str, results: list[TrialResult]) -> None:
    failed: Counter[str] = Counter()
    for r in results:
        failed.update(r.failed_by_code)
    print(f"== {name}: trials {len(results)}, acked {sum(r.acked for r in results)}, "
          f"lost {sum(r.lost for r in results)}, "
          f"duplicated {sum(r.duplicated for r in results)}, failed {dict(failed)}, "
          f"failed-but-stored {sum(r.failed_but_stored for r in results)}, "
          f"tracebacks {sum(r.tracebacks for r in results)}, "
          f"rebalances {sum(r.rebalances for r in results)}")
    for fault in FAULTS:
        times = [r.resume_s for r in results if r.fault == fault and r.resume_s is not None]
        if times:
            print(f"   resume after {fault}: median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s ({len(times)} trials)")
    takeovers = [r.takeover_s for r in results if r.takeover_s is not None]
    if takeovers:
        opened = [r.opened_s for r in results if r.opened_s is not None]
        served = [r.resume_s - r.takeover_s for r in results
                  if r.takeover_s is not None and r.resume_s is not None]
        print("   broker kill steps (median): kill -> take-over "
              f"{statistics.median(takeovers):.2f} s"
              + (f", -> partitions open {statistics.median(opened):.2f} s" if opened else "")
              + (f"; take-over -> served {statistics.median(served):.2f} s" if served else ""))
    baselines = [r.baseline_s for r in results if r.baseline_s is not None]
    if baselines:
        print(f"   longest pause in the 5 s before a fault (no fault yet): median "
              f"{statistics.median(baselines):.2f} s, max {max(baselines):.2f} s")
    rmq = [r.rocketmq for r in results if r.rocketmq is not None]
    if rmq:
        kinds: Counter[str] = Counter()
        for q in rmq:
            kinds.update(q.failed_by_kind)
        print(f"   rocketmq: acked {sum(q.acked for q in rmq)}, lost {sum(q.lost for q in rmq)}, "
              f"duplicated {sum(q.duplicated for q in rmq)}, failed {dict(kinds)}, "
              f"failed-but-stored {sum(q.failed_but_stored for q in rmq)}")
        for fault in FAULTS:
            times = [r.rocketmq.resume_s for r in results if r.fault == fault
                     and r.rocketmq is not None and r.rocketmq.resume_s is not None]
            if times:
                print(f"   rocketmq resume after {fault}: median "
                      f"{statistics.median(times):.2f} s, max {max(times):.2f} s")
    java = [r.java for r in results if r.java is not None]
    if java:
        errors: Counter[str] = Counter()
        for j in java:
            errors.update(j.failed_by_kind)
        print(f"   java: acked {sum(j.acked for j in java)}, lost {sum(j.lost for j in java)}, "
              f"duplicated {sum(j.duplicated for j in java)}, failed {dict(errors)}, "
              f"failed-but-stored {sum(j.failed_but_stored for j in java)}")
        for fault in FAULTS:
            times = [r.java.resume_s for r in results if r.fault == fault
                     and r.java is not None and r.java.resume_s is not None]
            if times:
                print(f"   java resume after {fault}: median "
                      f"{statistics.median(times):.2f} s, max {max(times):.2f} s")
    sys.stdout.flush()


def run_topology(name: str, base: Path, trials: int, rng: random.Random, batch: int,
                 rocketmq: bool = False, faults: tuple[str, ...] = FAULTS,
                 java: bool = False, settle: bool = True,
                 zk_tick_ms: int = 200) -> tuple[list[TrialResult], bool]:  # fmt: skip
    results: list[TrialResult] = []
    with Cluster(base / name, bookies=TOPOLOGIES[name], brokers=2, partitions=PARTITIONS,
                 lost_bookie_delay_s=5.0, open_ledger_grace_s=10.0, rocketmq=rocketmq,
                 handback_delay_s=None,  # the brokers' own hand-back delay
                 zk_tick_ms=zk_tick_ms) as cluster:
        try:
            if settle:  # the second broker gets its share after the hand-back delay
                wait_settled(cluster)
            for index in range(trials):
                result = trial(cluster, name, index, faults[index % len(faults)], rng, batch,
                               java, settle)
                show(index, result)
                results.append(result)
        except Exception as exc:
            print(f"chaos stopped: {exc!r}\n{cluster.logs()[-4000:]}", flush=True)
            return results, False
    return results, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per topology")
    parser.add_argument("--topology", default="spare",
                        help="comma-separated: " + ", ".join(TOPOLOGIES))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--batch", type=int, default=300, help="acks before and after a fault")
    parser.add_argument("--base", type=Path, default=None, help="working dir (default: temp)")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="comma-separated faults taking turns (default: all of them)")
    parser.add_argument("--no-settle", action="store_true",
                        help="do not wait for the hand-back after a broker fault before the next "
                        "trial (quicker; its pause may then land in the next trial's figures)")
    parser.add_argument("--java", action="store_true",
                        help="also the Java kafka-clients producer (its defaults) in every trial")
    parser.add_argument("--zk-tick-ms", type=int, default=200,
                        help="ZooKeeper tickTime: a session ends at the first tick past its "
                        "timeout (docs/cluster.md); 500 was used up to session 8")
    parser.add_argument("--rocketmq", action="store_true",
                        help="also a RocketMQ C++ producer in every trial")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.topology.split(",") if n.strip()]
    unknown = [n for n in names if n not in TOPOLOGIES]
    if unknown:
        parser.error(f"unknown topology {unknown}; known: {sorted(TOPOLOGIES)}")
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if not faults or set(faults) - set(FAULTS):
        parser.error(f"unknown fault in {args.faults!r}; known: {', '.join(FAULTS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    base = args.base or Path(tempfile.mkdtemp(prefix="ledgerwire-chaos-"))
    print(f"chaos: {args.trials} trials per topology {names}, seed {seed}, ZooKeeper tick "
          f"{args.zk_tick_ms} ms, in {base}", flush=True)
    started = time.monotonic()
    everything: list[TrialResult] = []
    complete = True
    for name in names:
        results, finished = run_topology(name, base, args.trials, rng, args.batch,
                                         args.rocketmq, faults, args.java, not args.no_settle,
                                         args.zk_tick_ms)
        summarize(name, results)
        everything += results
        complete = complete and finished
    rmq = [r.rocketmq for r in everything if r.rocketmq is not None]
    java = [r.java for r in everything if r.java is not None]
    lost = (sum(r.lost for r in everything) + sum(q.lost for q in rmq)
            + sum(j.lost for j in java))
    # RocketMQ 4.x sends are at least once (a send the client retried may be stored twice):
    # its duplicates are reported, not counted against the run
    duplicated = sum(r.duplicated for r in everything) + sum(j.duplicated for j in java)
    print(f"elapsed {time.monotonic() - started:.0f} s")
    print("trials, acked, lost, duplicated")
    print(f"{len(everything)}, {sum(r.acked for r in everything)}, {lost}, {duplicated}")
    if args.base is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if complete and lost == duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
