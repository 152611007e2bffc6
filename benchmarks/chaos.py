"""Chaos trials on a real loopback cluster: faults during acknowledged, idempotent produce.

One cluster (ZooKeeper, 4 bookies at E=3 Qw=2 Qa=2, 2 brokers) serves every trial.  A trial
produces to a fresh topic with confluent-kafka (idempotent, acks=all), injects one random
fault once a few hundred messages are acknowledged —

  kill-broker   SIGKILL a random broker, restart it after a random pause;
  kill-bookie   SIGKILL a random bookie, restart it (same data dir) after a random pause;
  stop-owner    SIGSTOP the owner of partition 0 past its ZooKeeper session, then SIGCONT —

keeps producing until as many messages again are acknowledged after the fault, then reads the
topic back and counts acknowledged messages that are missing (lost) and messages stored more
than once (duplicated).  Prints one line per trial, then the totals as

    trials, acked, lost, duplicated
    N, A, L, D

The producer keeps librdkafka's default request.timeout.ms (30 s), longer than any pause here.
With a request timeout shorter than a pause, librdkafka gives up on the in-flight request,
bumps the producer epoch and re-sends the messages under new sequence numbers; a message the
paused owner had already stored (but not acknowledged) is then stored twice — the client, not
the broker, has dropped the sequence that would have caught it.

Usage: python benchmarks/chaos.py --trials 100 [--seed 1] [--base DIR]
Exit status 1 if anything was lost or duplicated.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from tests.cluster.cluster_processes import Cluster  # noqa: E402
from tests.cluster.kafka_workload import (  # noqa: E402
    ProduceRun,
    create_topic,
    read_topic,
    verify,
)

PARTITIONS = 4
FAULTS = ("kill-broker", "kill-bookie", "stop-owner")


def wait_acks(run: ProduceRun, count: int, since: float, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while run.acked_since(since) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def heal(cluster: Cluster) -> None:
    """Every process alive and registered again, every bundle owned, before the next trial."""
    for node_id, broker in cluster.brokers.items():
        if not broker.alive:
            cluster.add_broker(node_id)
    for bookie in cluster.bookies:
        if not bookie.alive:
            bookie.start()
    deadline = time.monotonic() + 60
    while len(cluster.status()["brokers"]) < len(cluster.brokers):
        if time.monotonic() > deadline:
            raise TimeoutError("a restarted broker did not register")
        time.sleep(0.3)
    cluster.wait_all_bundles_owned(timeout_s=60)


def create_topic_retrying(cluster: Cluster, topic: str) -> None:
    for attempt in range(5):
        try:
            create_topic(cluster.bootstrap, topic, PARTITIONS, timeout_s=15)
            return
        except Exception as exc:  # a broker still settling: ask again
            print(f"create {topic}: {exc!r}; retrying", flush=True)
            time.sleep(1.0 + attempt)
    create_topic(cluster.bootstrap, topic, PARTITIONS)


def inject(cluster: Cluster, fault: str, rng: random.Random) -> str:
    if fault == "kill-broker":
        node_id = rng.choice(sorted(cluster.brokers))
        cluster.brokers[node_id].kill()
        time.sleep(rng.uniform(0.2, 3.0))
        cluster.add_broker(node_id, wait=False)
        return f"broker {node_id}"
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


def trial(cluster: Cluster, index: int, rng: random.Random, batch: int) -> tuple[int, int, int]:
    topic = f"chaos-{index}"
    cluster.chaos_topic = topic  # type: ignore[attr-defined]
    create_topic_retrying(cluster, topic)
    run = ProduceRun(cluster.bootstrap, topic, f"t{index}", rate_per_s=300).start()
    fault = rng.choice(FAULTS)
    try:
        if not wait_acks(run, batch, 0.0, 60):
            raise RuntimeError(f"trial {index}: no acks before the fault: {run.errors[-3:]}")
        at = time.monotonic()
        target = inject(cluster, fault, rng)
        if not wait_acks(run, batch, at, 120):
            raise RuntimeError(f"trial {index}: no acks after {fault}: {run.errors[-3:]}")
    finally:
        run.stop()
    heal(cluster)
    verdict = verify(run.acked, read_topic(cluster.bootstrap, topic, PARTITIONS, timeout_s=120))
    print(f"trial {index:3d} {fault:11s} {target:22s} acked={verdict.acked} "
          f"lost={verdict.lost} duplicated={verdict.duplicated} gaps={verdict.gaps} "
          f"client_errors={len(run.errors)}"
          + (f" first_error={run.errors[0]!r}" if run.errors else ""), flush=True)
    return verdict.acked, verdict.lost, verdict.duplicated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--batch", type=int, default=300, help="acks before and after a fault")
    parser.add_argument("--base", type=Path, default=None, help="working dir (default: temp)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    base = args.base or Path(tempfile.mkdtemp(prefix="ledgerwire-chaos-"))
    print(f"chaos: {args.trials} trials, seed {seed}, in {base}", flush=True)
    totals = [0, 0, 0]
    done = 0
    started = time.monotonic()
    with Cluster(base / "cluster", bookies=4, brokers=2, partitions=PARTITIONS,
                 lost_bookie_delay_s=5.0, open_ledger_grace_s=10.0) as cluster:
        try:
            for index in range(args.trials):
                acked, lost, duplicated = trial(cluster, index, rng, args.batch)
                totals = [totals[0] + acked, totals[1] + lost, totals[2] + duplicated]
                done += 1
        except Exception as exc:
            print(f"chaos stopped: {exc!r}\n{cluster.logs()[-4000:]}", flush=True)
    print(f"elapsed {time.monotonic() - started:.0f} s")
    print("trials, acked, lost, duplicated")
    print(f"{done}, {totals[0]}, {totals[1]}, {totals[2]}")
    if args.base is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if done == args.trials and totals[1] == totals[2] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
