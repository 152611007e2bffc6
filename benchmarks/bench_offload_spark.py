"""Spark on offloaded data: a replay and spark.read of a topic whose older ledgers live only in
a directory offload store, against a confluent-kafka drain of the same topic, same run.

Starts a `ledgerwire standalone` (fsync off, 1 MB ledgers, [offload] to a directory with no
deletion lag), fills an 8-partition topic with --bytes of 1 KB messages
(bench_spark_replay.fill_topic), offloads every closed ledger and drops its bookie copy
(`admin topics offload`: all but each partition's current ledger), then:
  1. drains the topic with one confluent-kafka consumer through the broker;
  2. `ledgerwire replay --to <parquet> --offload-directory <store>` in this process, after a
     job that starts the executors' Python workers (JVM start and worker start printed apart,
     as in bench_spark_replay);
  3. spark.read.format("ledgerwire") with ledgerwire.offload.directory, count and
     sum(length(value)), twice (cold, then warm).
It prints rows/s, MB/s, the broker's CPU seconds per phase and each Spark figure's ratio to
the drain (issue 18's goal: replay from offloaded data >= 1.0x the drain).
With --as-user, first a `ledgerwire replay` of the same topic as its own process, timed from
its start to its exit (JVM start, Python workers and the replay: what a user who runs the
command waits for), against a drain right before it, also timed from the consumer's creation:
the ratio a user sees, beside the in-session one that leaves out the starts.

    python benchmarks/bench_offload_spark.py --bytes 32MiB

This is a measuring tool: it must never be imported by the package.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_spark_replay import (  # noqa: E402
    VALUE_BYTES,
    cpu_seconds,
    drain,
    fill_topic,
    parse_size,
    report,
    spark_session,
)
from support.standalone import Standalone  # noqa: E402

TOPIC = "tiered"


def _warm_task(_item: int) -> int:
    import pyarrow.parquet  # noqa: F401 - what a replay task imports first

    import spark_bridge.parquet_replay  # noqa: F401

    return os.getpid()


def start_python_workers(spark: Any) -> float:
    """bench_spark_replay's warm-up job, defined here so the workers unpickle it by value (they
    cannot import the benchmarks); its seconds."""
    t0 = time.time()
    n = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(n), n).map(_warm_task).collect()
    return time.time() - t0


def replay_as_user(bootstrap: str, count: int, replay_argv: list[str]) -> None:
    """A drain, then `ledgerwire replay` as its own process (start to exit), and their ratio."""
    t0 = time.time()
    got, nbytes = drain(bootstrap, TOPIC, count)
    drain_s = time.time() - t0
    report("drain (as a user)", got, nbytes, drain_s, None)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "gateway", "replay", *replay_argv], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    replay_s = time.time() - t0
    report("`ledgerwire replay` process", count, count * VALUE_BYTES, replay_s, None)
    print(f"as a user waits (replay process start to exit, JVM and workers included): "
          f"{drain_s / replay_s:.2f}x the drain; load average {os.getloadavg()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", default="32MiB", help="topic size (default 32MiB)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=1,
                        help="more drain/replay pairs after the first, alternated; prints each "
                             "and the median ratio")
    parser.add_argument("--no-count", action="store_true", help="skip the spark.read counts")
    parser.add_argument("--as-user", action="store_true",
                        help="also time `ledgerwire replay` as its own process, start to exit")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-offload-spark-"))
    store = work / "tier"
    config = work / "ledgerwire.toml"
    config.write_text("[storage]\nmax_ledger_mb = 1\n"
                      f'[offload]\ndriver = "filesystem"\ndirectory = "{store}"\n'
                      "deletion_lag_s = 0\ninterval_s = 3600\n")  # fmt: skip
    config.chmod(0o600)
    broker = Standalone(work / "data", extra_args=["--no-fsync", "--config", str(config)])
    broker.start(timeout_s=120)
    assert broker.proc is not None
    pid = broker.proc.pid
    print(f"load average at start: {os.getloadavg()}", flush=True)
    try:
        count = fill_topic(broker.bootstrap, TOPIC, parse_size(args.bytes))
        rows = broker.admin("topics", "offload", TOPIC)
        offloaded = sum(r["bytes_offloaded"] for r in rows)
        on_bookies = sum(r["bytes_on_bookies"] for r in rows)
        print(f"filled {count:,} messages; offloaded {offloaded / 1e6:.1f} MB "
              f"({sum(r['ledgers_offloaded'] for r in rows)} ledgers, bookie copies deleted), "
              f"{on_bookies / 1e6:.1f} MB left on bookies", flush=True)

        replay_argv = ["--topic", TOPIC, "--to", str(work / "replay.parquet"),
                       "--metadata", str(broker.data_dir), "--master", args.master,
                       "--offload-directory", str(store), "--no-ui", "--overwrite",
                       "--progress-interval", "600"]  # fmt: skip
        if args.as_user:
            replay_as_user(broker.bootstrap, count, replay_argv)

        cpu0, t0 = cpu_seconds(pid), time.time()
        got, nbytes = drain(broker.bootstrap, TOPIC, count)
        drain_s = time.time() - t0
        report("confluent-kafka drain", got, nbytes, drain_s, cpu_seconds(pid) - cpu0)

        t0 = time.time()
        spark = spark_session(args.master)
        print(f"{'Spark JVM start':<28} {time.time() - t0:>7.1f} s (not in the figures below)",
              flush=True)
        from spark_bridge.cli import replay_main

        print(f"{'Python workers start':<28} {start_python_workers(spark):>7.1f} s (once per "
              "session; not in the figures below)", flush=True)

        ratios: list[float] = []
        for n in range(args.rounds):
            if n:
                cpu0, t0 = cpu_seconds(pid), time.time()
                got, nbytes = drain(broker.bootstrap, TOPIC, count)
                drain_s = time.time() - t0
                report(f"  round {n + 1}: drain", got, nbytes, drain_s, cpu_seconds(pid) - cpu0)
            cpu0, t0 = cpu_seconds(pid), time.time()
            code = replay_main(replay_argv)
            replay_s = time.time() - t0
            if code != 0:
                raise SystemExit(f"replay failed with exit code {code}")
            report("ledgerwire replay (CLI)" if not n else f"  round {n + 1}: replay", count,
                   count * VALUE_BYTES, replay_s, cpu_seconds(pid) - cpu0)  # fmt: skip
            ratios.append(drain_s / replay_s)
        if args.rounds > 1:
            print(f"replay/drain per round: {', '.join(f'{r:.2f}x' for r in ratios)}; median "
                  f"{statistics.median(ratios):.2f}x", flush=True)
        figures = {"replay CLI": replay_s}
        for label in ("spark.read count (cold)", "spark.read count (warm)"):
            if args.no_count:
                break
            df = (spark.read.format("ledgerwire")
                  .option("ledgerwire.metadata", str(broker.data_dir))
                  .option("ledgerwire.offload.directory", str(store))
                  .option("subscribe", TOPIC).load())  # fmt: skip
            cpu0, t0 = cpu_seconds(pid), time.time()
            result = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
            figures[label] = time.time() - t0
            report(label, int(result["n"]), int(result["b"]), figures[label],
                   cpu_seconds(pid) - cpu0)
        print("ratios to the drain (same run, rows/s): " + ", ".join(
            f"{label} {drain_s / seconds:.2f}x" for label, seconds in figures.items()),
            flush=True)  # fmt: skip
        print(f"load average at end: {os.getloadavg()}", flush=True)
        spark.stop()
    finally:
        broker.stop(timeout_s=120)


if __name__ == "__main__":
    main()
