"""Benchmark of a bookie's restart: index-log load, journal replay, first checkpoint.

Builds a data directory through the storage engine itself (``open_bookie_storage``, fsync off
for the set-up only): ``--entries`` small entries over ``--ledgers`` ledgers, a checkpoint every
``--checkpoint-every`` adds (so the index log has the shape a running bookie leaves: one batch
record per checkpoint, one block per ledger in it), then ``--delete-fraction`` of the ledgers
deleted, then ``--journal-tail`` more adds that only the journal holds (the set-up process dies
with ``os._exit`` before its final checkpoint, as a crash would).  ``--snapshot`` rewrites the
index log as a snapshot first (the shape after an index-log rewrite).

Then, in a fresh process each (so RSS is that of a starting bookie), it times
  * ``IndexLog.load`` alone (the index rebuild), and
  * a whole restart: entering ``open_bookie_storage`` (index load + journal replay + the first
    checkpoint), with RSS before and after,
and prints seconds and entries/s.  ``--profile`` adds a cProfile of ``IndexLog.load`` and of the
restart's Trio thread (worker threads are not in cProfile: use py-spy for those).  Run:

    python benchmarks/bench_bookie_startup.py [--dir /tmp/bench-startup] [--entries 1000000]

It must never be run against a data directory that matters: it deletes --dir first (unless
--reuse is given: then it restarts from the copy ``<dir>.pristine`` an earlier run with the same
arguments left).

Measured (2 shared cores, fsync off; 1M adds, 20% of the ledgers deleted, 20k-record journal
tail; seconds, median of 3; "before" is the per-entry ``EntryIndex.set`` rebuild):

    shape                                   index load       restart (load+replay+checkpoint)
    100 ledgers, 50 checkpoints             0.94 -> 0.044    1.05 -> 0.16
    10,000 ledgers, 50 checkpoints          1.87 -> 0.41     2.04 -> 0.54
    100 ledgers, after a snapshot rewrite   0.78 -> 0.043    0.99 -> 0.16

Anonymous RSS after the load is the same or lower (arrays are sized exactly); peak VmRSS counts
the mapped index-log file's pages (page cache, reclaimable) while it is read.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from ledger_backend.bookie.entry_index import EntryIndex, IndexLog
from ledger_backend.bookie.ledger_state import LedgerState
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


def bench_config(directory: Path, *, fsync: bool) -> BookieStorageConfig:
    return BookieStorageConfig(
        data_dir=directory,
        fsync=fsync,
        write_cache_bytes=256 << 20,  # checkpoints come from --checkpoint-every, not the cache
        flush_interval_s=3600.0,
        gc_interval_s=0,
        disk_check_interval_s=3600.0,
        journal_max_group_wait_s=0.001,
    )


def rss_kib() -> tuple[int, int, int]:
    """(VmRSS, VmHWM, RssAnon) of this process in KiB (mapped index-log pages are RssFile)."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            found[key] = int(value.split()[0])
    return found.get("VmRSS", 0), found.get("VmHWM", 0), found.get("RssAnon", 0)


async def build(args: argparse.Namespace) -> None:
    """Fill the directory, then die before the final checkpoint (journal tail unreplayed)."""
    directory = Path(args.dir)
    payload = os.urandom(args.entry_size)
    concurrency = 256
    async with open_bookie_storage(bench_config(directory, fsync=False)) as storage:
        next_entry = [0] * args.ledgers
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for w in range(concurrency):
                nursery.start_soon(_fill, storage, w, concurrency, args, next_entry, payload)
        await storage.checkpoint()
        for ledger in range(int(args.ledgers * args.delete_fraction)):
            await storage.delete_ledger(ledger * 2 % args.ledgers + 1)
        await storage.checkpoint()
        if args.snapshot:
            await _rewrite_index_log(storage)
        tail_start = sum(next_entry)
        for i in range(args.journal_tail):
            ledger = args.ledgers - 1 - (i % max(1, args.ledgers // 2))
            entry = next_entry[ledger]
            next_entry[ledger] += 1
            await storage.add_entry(ledger + 1, entry, entry - 1, payload)
        assert storage.journal is not None
        await storage.journal.drain()
        print(
            json.dumps(
                {
                    "setup_s": round(time.perf_counter() - started, 2),
                    "entries_indexed": storage.index.entry_count,
                    "journal_tail": sum(next_entry) - tail_start,
                    "index_log_bytes": storage.index_log.size,
                }
            ),
            flush=True,
        )
        os._exit(0)  # a crash: no final checkpoint, the tail stays in the journal only


async def _fill(
    storage: Any,
    worker: int,
    concurrency: int,
    args: argparse.Namespace,
    next_entry: list[int],
    payload: bytes,
) -> None:
    """Worker ``worker`` adds every concurrency-th entry; worker 0 checkpoints on cadence."""
    rounds = args.entries // concurrency
    for r in range(rounds):
        i = r * concurrency + worker
        ledger = i % args.ledgers
        entry = next_entry[ledger]
        next_entry[ledger] += 1
        await storage.add_entry(ledger + 1, entry, entry - 1, payload)
        if worker == 0 and (r + 1) * concurrency % args.checkpoint_every < concurrency:
            await storage.checkpoint()


async def _rewrite_index_log(storage: Any) -> None:
    old = storage.config.index_log_rewrite_ratio
    storage.config.index_log_rewrite_ratio = 0.0
    try:
        async with storage.checkpoint_lock:
            await storage._maybe_rewrite_index_log()
    finally:
        storage.config.index_log_rewrite_ratio = old


def measure_load(args: argparse.Namespace) -> dict[str, Any]:
    index_dir = Path(args.dir) / "ledgers" / "index"
    index, states = EntryIndex(), dict[int, LedgerState]()
    before, _hwm, anon_before = rss_kib()
    profiler = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    index_log = IndexLog(index_dir, fsync=False)
    index_log.load(index, states)
    if profiler is not None:
        profiler.disable()
    elapsed = time.perf_counter() - started
    index_log.close()
    rss, hwm, anon = rss_kib()
    if profiler is not None:
        _print_profile(profiler, "IndexLog.load")
    return {
        "load_s": round(elapsed, 3),
        "entries": index.entry_count,
        "ledgers": len(index.ledger_ids()),
        "entries_per_s": round(index.entry_count / elapsed),
        "rss_growth_mib": round((rss - before) / 1024, 1),
        "anon_rss_growth_mib": round((anon - anon_before) / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
    }


async def measure_restart(args: argparse.Namespace) -> dict[str, Any]:
    config = bench_config(Path(args.dir), fsync=args.fsync)
    before, _hwm, anon_before = rss_kib()
    profiler = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    async with open_bookie_storage(config) as storage:
        if profiler is not None:
            profiler.disable()
        elapsed = time.perf_counter() - started
        rss, hwm, anon = rss_kib()
        figures = {
            "restart_s": round(elapsed, 3),
            "entries": storage.index.entry_count,
            "entries_per_s": round(storage.index.entry_count / elapsed),
            "replayed_records": storage.replayed_records,
            "phases_s": {k: round(v, 3) for k, v in storage.startup_seconds.items()},
            "rss_growth_mib": round((rss - before) / 1024, 1),
            "anon_rss_growth_mib": round((anon - anon_before) / 1024, 1),
            "peak_rss_mib": round(hwm / 1024, 1),
        }
    if profiler is not None:
        _print_profile(profiler, "restart (Trio thread)")
    return figures


def _print_profile(profiler: cProfile.Profile, title: str) -> None:
    print(f"--- profile: {title} (top 12 by own time) ---", file=sys.stderr)
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(12)


def run_child(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    argv = [sys.executable, os.path.abspath(sys.argv[0]), "--child", mode, *sys.argv[1:]]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/tmp/bench-bookie-startup")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--ledgers", type=int, default=100)
    parser.add_argument("--entry-size", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=20_000)
    parser.add_argument("--delete-fraction", type=float, default=0.2)
    parser.add_argument("--journal-tail", type=int, default=20_000)
    parser.add_argument("--snapshot", action="store_true", help="rewrite the index log first")
    parser.add_argument("--fsync", action="store_true", help="fsync during the restart")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="keep an existing --dir")
    parser.add_argument("--child", choices=["build", "load", "restart"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "build":
        trio.run(build, args)
        return
    if args.child == "load":
        print(json.dumps(measure_load(args)))
        return
    if args.child == "restart":
        print(json.dumps(trio.run(measure_restart, args)))
        return
    directory = Path(args.dir)
    pristine = Path(str(directory) + ".pristine")
    if not (args.reuse and pristine.exists()):
        shutil.rmtree(directory, ignore_errors=True)
        print("build:", run_child(args, "build"), flush=True)
        # keep a pristine copy: the restart checkpoints and trims the journal
        shutil.rmtree(pristine, ignore_errors=True)
        shutil.copytree(directory, pristine)
    else:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(pristine, directory)
    print("index load:", run_child(args, "load"), flush=True)
    print("restart:", run_child(args, "restart"), flush=True)
    shutil.rmtree(directory)
    shutil.copytree(pristine, directory)


if __name__ == "__main__":
    main()
