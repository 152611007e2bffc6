"""Bookie add/read throughput and latency through the real ledger client, on loopback.

Runs bookies as SUBPROCESSES of this script (`--serve-bookie DIR`: serve_bookie over the real
storage engine, `open_bookie_storage`, fsync on unless --no-fsync) and registers their addresses
in an in-memory metadata store of the client process, so no ZooKeeper is needed. For each
configuration (one bookie E=Qw=Qa=1, three bookies E=3 Qw=2 Qa=2) and entry size it appends
`--bytes` worth of entries with `--window` appends in flight, then reads them all back, and
prints entries/s, MB/s and p50/p99 add latency.

    python benchmarks/bench_bookie.py                      # 1 KB and 64 KB, both configs
    python benchmarks/bench_bookie.py --sizes 65536 --configs 1 --bytes 512MiB --window 64
    python benchmarks/bench_bookie.py --security tls       # none | secret | tls (+ secret)

Measured 2026-11-21 on the 2-core dev VM (shared with other jobs, so +-30%), fsync on,
window 256, each case on fresh bookies:
    1 bookie  64 KB: 240-270 MB/s add (p50 ~40 ms, p99 120-480 ms), reads 320-360 MB/s
    1 bookie   1 KB: ~9-10k entries/s add, ~9-10k entries/s read
    3 bookies 64 KB (E=3 Qw=2 Qa=2): 130-210 MB/s add, reads 375-590 MB/s
    3 bookies  1 KB: ~6.6k entries/s add, ~10k entries/s read
Where the time goes: 64 KB adds are disk-bound (fsync off doubles single-bookie throughput to
~520 MB/s; every byte is written twice, journal then entry log, and three bookies share one
disk); the client then spends ~80 us CPU per add. 1 KB adds are CPU-bound in Python/Trio:
~100 us client CPU per add (scheduling, one cancel scope and one Event per append) plus the
bookie's per-request work, all on 2 cores.

This is a measuring tool: it must never be imported by the package.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

MIB = 1 << 20


@dataclass
class Result:
    label: str
    entries: int
    entry_bytes: int
    add_seconds: float
    latencies_s: list[float]
    read_seconds: float

    def lines(self) -> list[str]:
        lat = sorted(self.latencies_s)
        p50 = lat[len(lat) // 2] * 1000
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        mb = self.entries * self.entry_bytes / MIB
        return [
            f"{self.label:<28} add : {self.entries / self.add_seconds:9.0f} entries/s "
            f"{mb / self.add_seconds:8.1f} MB/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms",
            f"{'':<28} read: {self.entries / self.read_seconds:9.0f} entries/s "
            f"{mb / self.read_seconds:8.1f} MB/s",
        ]


def parse_bytes(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1000, "mb": 10**6}
    lowered = text.lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            return int(float(lowered[: -len(suffix)]) * factor)
    return int(lowered)


# --- the bookie subprocess ------------------------------------------------------------------


async def serve_one_bookie(data_dir: Path, fsync: bool, security: Path | None) -> None:
    from ledger_backend.bookie.server import serve_bookie
    from ledger_backend.bookie.storage import open_bookie_storage
    from ledger_backend.bookie.storage_api import BookieStorageConfig

    config = BookieStorageConfig(data_dir, fsync=fsync)
    secret, tls = _security(security)
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with open_bookie_storage(config) as storage, trio.open_nursery() as nursery:
            address = await nursery.start(functools.partial(
                serve_bookie, storage, None, "127.0.0.1", 0, secret=secret,
                ssl_context=tls.server_context() if tls else None))
            print(f"BOOKIE {address}", flush=True)
            started_wall, started_cpu = time.perf_counter(), os.times()
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
            cpu = os.times()
            journal = storage.journal
            stats = {
                "wall_s": round(time.perf_counter() - started_wall, 2),
                "cpu_user_s": round(cpu.user - started_cpu.user, 2),
                "cpu_sys_s": round(cpu.system - started_cpu.system, 2),
                "journal_groups": journal.groups_written if journal else None,
                "journal_triggers": dict(journal.triggers) if journal else None,
                "checkpoints": storage.stats.checkpoints,
            }
            print(f"STATS {json.dumps(stats)}", flush=True)


def _security(directory: Path | None) -> tuple[Any, Any]:
    """(BookieSecret, BookieTls) from a directory made by _make_security (None, None: off)."""
    from ledger_backend.bookie.auth import BookieSecret
    from ledger_backend.bookie.tls import BookieTls

    if directory is None:
        return None, None
    secret = BookieSecret.load(file=directory / "secret")
    cert = directory / "cert.pem"
    tls = BookieTls(str(cert), str(directory / "key.pem"), str(cert)) if cert.exists() else None
    return secret, tls


def _make_security(directory: Path, kind: str) -> Path | None:
    """A bookie secret (and, for "tls", a self-signed certificate for 127.0.0.1)."""
    if kind == "none":
        return None
    directory.mkdir()
    (directory / "secret").write_text("bench-bookie-secret-0123456789\n")
    (directory / "secret").chmod(0o600)
    if kind == "tls":
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(directory / "key.pem"),
             "-out", str(directory / "cert.pem"), "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
    return directory


class BookieProcesses:
    def __init__(self, count: int, base_dir: Path, fsync: bool,
                 security: Path | None = None) -> None:  # fmt: skip
        self.procs: list[subprocess.Popen[str]] = []
        self.addresses: list[str] = []
        for i in range(count):
            data_dir = base_dir / f"bookie-{i}"
            data_dir.mkdir(parents=True)
            cmd = [sys.executable, __file__, "--serve-bookie", str(data_dir)]
            if not fsync:
                cmd.append("--no-fsync")
            if security is not None:
                cmd += ["--security-dir", str(security)]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            self.procs.append(proc)
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("BOOKIE "):
                raise RuntimeError(f"bookie did not start: {line!r}")
            self.addresses.append(line.split()[1])

    def stop(self) -> list[str]:
        """Stop the bookies; return the STATS lines they printed on the way out."""
        for proc in self.procs:
            proc.terminate()
        stats: list[str] = []
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            stats += [line[6:] for line in out.splitlines() if line.startswith("STATS ")]
        return stats


# --- the client side ------------------------------------------------------------------------


async def run_case(
    addresses: list[str], ensemble: tuple[int, int, int], entry_bytes: int, total_bytes: int,
    window: int, label: str, security: Path | None = None,
) -> Result:  # fmt: skip
    from ledger_backend.client.bookkeeper import BookKeeper
    from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
    from ledger_backend.metadata import open_store

    store = await open_store("memory:")
    for address in addresses:
        await store.create(f"{AVAILABLE_BOOKIES_PATH}/{address}", b"", make_parents=True)
    entries = max(window * 4, total_bytes // entry_bytes)
    payload = os.urandom(entry_bytes)
    latencies: list[float] = []
    secret, tls = _security(security)
    async with BookKeeper(store, timeout_s=30, bookie_secret=secret, bookie_tls=tls) as bk:
        # warm-up ledger: connections, caches, JIT-less Python paths
        warm = await bk.create_ledger(*ensemble)
        for _ in range(min(200, entries)):
            await warm.append(payload)
        await warm.close()

        wh = await bk.create_ledger(*ensemble)
        limiter = trio.Semaphore(window)

        async def add_one() -> None:
            started = time.perf_counter()
            await wh.append(payload)
            latencies.append(time.perf_counter() - started)
            limiter.release()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(entries):
                await limiter.acquire()
                nursery.start_soon(add_one)
        add_seconds = time.perf_counter() - t0
        await wh.close()

        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        t0 = time.perf_counter()
        chunk = max(1, min(256, (8 * MIB) // entry_bytes))
        for first in range(0, entries, chunk):
            got = await rh.read(first, min(entries, first + chunk) - 1)
            assert len(got[0]) == entry_bytes
        read_seconds = time.perf_counter() - t0
    await store.close()
    return Result(label, entries, entry_bytes, add_seconds, latencies, read_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-bookie", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-fsync", action="store_true", help="bookies skip fsync")
    parser.add_argument("--sizes", default="1024,65536", help="entry sizes in bytes")
    parser.add_argument("--configs", default="1,3", help="1: E=Qw=Qa=1; 3: E=3 Qw=2 Qa=2")
    parser.add_argument("--bytes", default="256MiB", help="bytes to append per case")
    parser.add_argument("--max-entries", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=256, help="appends in flight")
    parser.add_argument("--profile", action="store_true", help="cProfile the client process")
    parser.add_argument("--security", choices=("none", "secret", "tls"), default="none",
                        help="bookie connections: open, shared-secret handshake, or TLS + it")
    parser.add_argument("--security-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    fsync = not args.no_fsync
    if args.serve_bookie is not None:
        profile_to = os.environ.get("BENCH_PROFILE_BOOKIE")  # a path prefix: one file per bookie
        if profile_to:
            import cProfile

            profiler = cProfile.Profile()
            try:
                profiler.runcall(trio.run, serve_one_bookie, args.serve_bookie, fsync,
                                 args.security_dir)
            finally:
                profiler.dump_stats(f"{profile_to}.{os.getpid()}")
        else:
            trio.run(serve_one_bookie, args.serve_bookie, fsync, args.security_dir)
        return
    total_bytes = parse_bytes(args.bytes)
    print(f"bookies in subprocesses, fsync={'on' if fsync else 'off'}, window={args.window}, "
          f"security={args.security}, cpus={os.cpu_count()}")  # fmt: skip
    for config in args.configs.split(","):
        count, quorum = {"1": (1, (1, 1, 1)), "3": (3, (3, 2, 2))}[config]
        for size in (int(s) for s in args.sizes.split(",")):
            case_bytes = min(total_bytes, args.max_entries * size)
            label = f"{count} bookie(s) E/Qw/Qa={quorum} {size // 1024}KB"
            with tempfile.TemporaryDirectory(prefix="bench-bookie-") as tmp:
                security = _make_security(Path(tmp) / "security", args.security)
                bookies = BookieProcesses(count, Path(tmp), fsync, security)  # fresh per case
                try:
                    case = functools.partial(run_case, bookies.addresses, quorum, size,
                                             case_bytes, args.window, label,
                                             security)  # fmt: skip
                    client_cpu = os.times()
                    if args.profile:
                        import cProfile
                        import pstats

                        profiler = cProfile.Profile()
                        result = profiler.runcall(trio.run, case)
                        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
                    else:
                        result = trio.run(case)
                    cpu = os.times()
                finally:
                    bookie_stats = bookies.stop()
                for line in result.lines():
                    print(line, flush=True)
                print(f"{'':<28} client cpu: user {cpu.user - client_cpu.user:.2f}s sys "
                      f"{cpu.system - client_cpu.system:.2f}s (adds + reads)")  # fmt: skip
                for line in bookie_stats:
                    print(f"{'':<28} bookie: {line}", flush=True)


if __name__ == "__main__":
    main()
