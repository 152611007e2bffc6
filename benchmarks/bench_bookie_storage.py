"""Benchmark of the durable bookie storage engine (fsync on, group commit).

Prints entries/s, MB/s and add latency p50/p99 for 1 KB and 64 KB adds at a given concurrency,
then read throughput from the caches (write cache / read cache) and from disk (entry logs,
after a checkpoint, with a cold read cache).  Run:

    python benchmarks/bench_bookie_storage.py [--dir /tmp/bench] [--seconds 5] [--concurrency 64]

It must never be run against a data directory that matters: it deletes --dir first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

import trio

from ledger_backend.bookie.read_cache import ReadCache
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def drop_page_cache(directory: Path) -> None:
    """Ask the kernel to forget the (clean, fsynced) pages of the entry logs."""
    for path in directory.glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


async def bench_adds(
    directory: Path,
    entry_size: int,
    concurrency: int,
    seconds: float,
    ledgers: int,
    queue_empty: bool = True,
    preallocate_bytes: int | None = None,
) -> dict[str, float]:
    shutil.rmtree(directory, ignore_errors=True)
    config = BookieStorageConfig(
        data_dir=directory, fsync=True, journal_flush_when_queue_empty=queue_empty
    )
    if preallocate_bytes is not None:
        config.journal_preallocate_bytes = preallocate_bytes
    payload = os.urandom(entry_size)
    latencies: list[float] = []
    count = 0
    async with open_bookie_storage(config) as storage:
        next_entry = [0] * ledgers
        deadline = time.perf_counter() + seconds

        async def writer(worker: int) -> None:
            nonlocal count
            ledger = worker % ledgers
            while time.perf_counter() < deadline:
                entry = next_entry[ledger]
                next_entry[ledger] += 1
                t0 = time.perf_counter()
                await storage.add_entry(ledger + 1, entry, entry - 1, payload)
                latencies.append(time.perf_counter() - t0)
                count += 1

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for w in range(concurrency):
                nursery.start_soon(writer, w)
        elapsed = time.perf_counter() - start
        triggers = dict(storage.journal.triggers) if storage.journal else {}
        groups = storage.journal.groups_written if storage.journal else 0

        # reads: entries that fit the read cache, first from the caches (after a warm-up pass),
        # then from the entry logs with a cold read cache and the OS page cache dropped
        await storage.checkpoint()
        per_ledger = max(1, config.read_cache_bytes // 2 // entry_size // ledgers)
        sample = [
            (ledger + 1, e)
            for ledger in range(ledgers)
            for e in range(min(next_entry[ledger], per_ledger))
        ]
        for ledger_id, entry_id in sample:
            await storage.read_entry(ledger_id, entry_id)
        t0 = time.perf_counter()
        for ledger_id, entry_id in sample:
            await storage.read_entry(ledger_id, entry_id)
        hot = time.perf_counter() - t0
        storage.read_cache = ReadCache(config.read_cache_bytes)
        drop_page_cache(directory / "ledgers" / "entrylogs")
        t0 = time.perf_counter()
        for ledger_id, entry_id in sample:
            await storage.read_entry(ledger_id, entry_id)
        cold = time.perf_counter() - t0
    return {
        "entries_s": count / elapsed,
        "mb_s": count * entry_size / elapsed / 1e6,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000 if latencies else float("nan"),
        "groups": groups,
        "triggers": triggers,  # type: ignore[dict-item]
        "read_hot_entries_s": len(sample) / hot,
        "read_hot_mb_s": len(sample) * entry_size / hot / 1e6,
        "read_disk_entries_s": len(sample) / cold,
        "read_disk_mb_s": len(sample) * entry_size / cold / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ledgerwire-bench-bookie"))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--ledgers", type=int, default=8)
    parser.add_argument(
        "--max-wait-only",
        action="store_true",
        help="journal_flush_when_queue_empty=False: groups by max wait / bytes only",
    )
    parser.add_argument(
        "--preallocate-bytes", type=int, action="append", metavar="N",
        help="journal_preallocate_bytes (repeat it to alternate settings in one run, e.g. "
             "--preallocate-bytes 0 --preallocate-bytes 4194304)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 64 * 1024])
    args = parser.parse_args()
    settings: list[int | None] = args.preallocate_bytes or [None]
    for size in args.sizes:
        for preallocate in settings:
            report_adds(args, size, preallocate)
    shutil.rmtree(args.dir, ignore_errors=True)


def report_adds(args: argparse.Namespace, size: int, preallocate: int | None) -> None:
    r = trio.run(
        bench_adds,
        args.dir,
        size,
        args.concurrency,
        args.seconds,
        args.ledgers,
        not args.max_wait_only,
        preallocate,
    )
    setting = "" if preallocate is None else f" prealloc {preallocate >> 10} KiB"
    print(
        f"add {size // 1024:>3} KB x{args.concurrency}{setting}: "
        f"{r['entries_s']:>9.0f} entries/s "
        f"{r['mb_s']:>7.1f} MB/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
        f"groups {r['groups']} triggers {r['triggers']}"
    )
    print(
        f"read {size // 1024:>2} KB: cache {r['read_hot_entries_s']:>9.0f} entries/s "
        f"{r['read_hot_mb_s']:>7.1f} MB/s | disk {r['read_disk_entries_s']:>9.0f} entries/s "
        f"{r['read_disk_mb_s']:>7.1f} MB/s"
    )


if __name__ == "__main__":
    main()
