"""Tiered storage throughput: offloading to a directory, and reads of offloaded vs bookie data.

A managed ledger on one durable in-process bookie (on-disk journal and entry log), reached
over TCP, gets N MB of 16 KB entries in 8 MB ledgers. Then (a) every closed ledger is read
through the managed ledger from the bookie, (b) every closed ledger is offloaded to a
directory (read from the bookie, encoded, written with fsync, read back and compared) and the
bookie copies deleted, (c) the same reads are served from the objects (cold cache: a fresh
factory). (a) and (b) run twice in the same run: with a ledger client reading entry by entry
("single", BookKeeper(batch_reads=False)) and with batch reads (READ_ENTRIES), and print the
ratio. Each line gives MB/s and the process CPU per MB (bookie and client both in this
process), plus (b) without the bookie read.
With --local the readers reach the bookie in-process (BookKeeper(local_bookies=True), as
`ledgerwire standalone` does: no wire encode/decode) instead of over loopback TCP. Since the
work is CPU-bound on a shared machine, read MB/s together with ms CPU/MB and `uptime`.
Run: `python benchmarks/bench_offload.py [MB] [--s3] [--local] [--batch-only] [--runs N]`
(--s3 also offloads to moto's S3 server, which is slow Python: a functional figure, not a
store's; --batch-only skips the entry-by-entry reads and offloads; --runs N offloads N fresh
64 MB ledger sets per store with batch reads and prints each figure and their median, the
figure issue 18's goal of 200 MB/s to a directory is judged by). Each offload starts after
the fill's writes are on the disk (os.sync outside the timing).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from ledger_backend.managed_ledger.offloading import _verify as verify_upload
from ledger_backend.metadata import open_store
from ledger_backend.offload import FilesystemOffloader, Offloader
from ledger_backend.offload.object_format import encode_object_parts

ENTRY = 16 << 10
CONFIG = ManagedLedgerConfig(max_ledger_bytes=8 << 20, tail_cache_bytes=0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def read_closed(factory: ManagedLedgerFactory, name: str) -> tuple[int, float]:
    ml = await factory.open(name, CONFIG)
    closed = [i for i in ml.ledgers if i.closed and i.entries > 0]
    total = 0
    start = time.perf_counter()
    for info in closed:
        position: Position | None = Position(info.ledger_id, 0)
        read = 0
        while read < info.entries:
            assert position is not None
            batch = await ml.read(position, 256)
            read += len(batch)
            total += sum(len(e.data) for e in batch)
            position = ml.next_position(batch[-1].position)
    return total, time.perf_counter() - start


async def fill(factory: ManagedLedgerFactory, name: str, mb: int) -> None:
    ml = await factory.open(name, CONFIG)
    payload = b"x" * ENTRY
    async with trio.open_nursery() as writers:
        for _ in range(16):
            async def write(count: int = mb * (1 << 20) // ENTRY // 16) -> None:
                for _ in range(count):
                    await ml.append(payload)
            writers.start_soon(write)
    await ml.close()


def rate(size: int, wall: float, cpu: float) -> str:
    return f"{size / wall / 1e6:8.1f} MB/s  {cpu / (size / 1e6) * 1e3:6.2f} ms CPU/MB"


async def bench(mb: int, tmp: Path, s3_endpoint: str | None, local: bool, batch_only: bool,
                runs: int) -> None:
    store = await open_store(str(tmp / "meta"))
    port = free_port()
    config = BookieStorageConfig(data_dir=tmp / "bookie", flush_interval_s=0.05,
                                 disk_check_interval_s=3600.0)
    modes: tuple[tuple[str, bool], ...] = (("single", False), ("batch", True))  # vs READ_ENTRIES
    if batch_only:
        modes = modes[1:]
    async with open_bookie_storage(config) as storage, trio.open_nursery() as nursery:
        await nursery.start(serve_bookie, storage, store, "127.0.0.1", port)
        async with BookKeeper(store, timeout_s=30) as bk:
            await fill(ManagedLedgerFactory(store, bk), "bench/tiered", mb)
            figures: dict[str, float] = {}
            for label, batch in modes:
                async with BookKeeper(store, timeout_s=30, batch_reads=batch,
                                      local_bookies=local) as reader:
                    cpu = time.process_time()
                    total, took = await read_closed(ManagedLedgerFactory(store, reader),
                                                    "bench/tiered")
                    cpu = time.process_time() - cpu
                figures[f"read {label}"] = total / took
                print(f"read from bookie ({label:6s}):  {rate(total, took, cpu)} "
                      f"({total >> 20} MB; bookie and client in this process, "
                      f"{'in-process calls' if local else 'loopback TCP'})")
            if not batch_only:
                print(f"  batch / single: {figures['read batch'] / figures['read single']:.2f}x")

            offloaders: list[tuple[str, Offloader]] = [
                ("filesystem", FilesystemOffloader(tmp / "tier"))]
            if s3_endpoint is not None:
                from ledger_backend.offload.object_store import ObjectStoreOffloader
                offloaders.append(("s3 (moto)", ObjectStoreOffloader.s3(
                    "ledgers", endpoint=s3_endpoint, access_key_id="x", secret_access_key="x")))
            for label, offloader in offloaders:
                rates: list[float] = []
                for mode, batch in [*modes, *[("batch", True)] * (runs - 1)]:
                    name = f"bench/{label.split()[0]}-{mode}-{len(rates)}"
                    await fill(ManagedLedgerFactory(store, bk), name, min(mb, 64))
                    # the fill's own writes (journal, entry log) reach the disk before the
                    # timed offload, so they do not share the disk with its fsyncs
                    await trio.to_thread.run_sync(os.sync)
                    async with BookKeeper(store, timeout_s=30, batch_reads=batch,
                                          local_bookies=local) as reader:
                        factory = ManagedLedgerFactory(store, reader, offloader=offloader)
                        ml = await factory.open(name, CONFIG)
                        size = sum(i.size for i in ml.ledgers if i.closed)
                        cpu = time.process_time()
                        start = time.perf_counter()
                        async with rss_watch() as rss:
                            await ml.offload()
                        took = time.perf_counter() - start
                        cpu = time.process_time() - cpu
                        await ml.delete_offloaded_bookie_copies(0)
                        await factory.close()
                    figures[f"offload {mode}"] = size / took
                    if batch:
                        rates.append(size / took / 1e6)
                    print(f"offload to {label} ({mode:6s}): {rate(size, took, cpu)} "
                          f"({size >> 20} MB, read + encode + write + verify; RSS "
                          f"{rss[0] >> 20} -> peak {rss[1] >> 20} MB; {load()})")
                if not batch_only:
                    print(f"  batch / single: "
                          f"{figures['offload batch'] / figures['offload single']:.2f}x")
                if runs > 1:
                    print(f"  offload to {label}, {len(rates)} runs: median "
                          f"{statistics.median(rates):.1f} MB/s (min {min(rates):.1f}, "
                          f"max {max(rates):.1f})")
                entries = [b"x" * ENTRY] * (size // ENTRY)
                cpu = time.process_time()
                start = time.perf_counter()
                # as an offload stores a ledger: parts, written, read back and checked
                data = await trio.to_thread.run_sync(encode_object_parts, 1, entries)
                await offloader.put("bench/encode-only.lwo", data.parts)
                await verify_upload(offloader, "bench/encode-only.lwo", data)
                took = time.perf_counter() - start
                cpu = time.process_time() - cpu
                print(f"  of which encode + write + verify: {rate(size, took, cpu)} "
                      "(entries already in memory)")
                cold = ManagedLedgerFactory(store, bk, offloader=offloader)
                cpu = time.process_time()
                total, took = await read_closed(cold, name)
                cpu = time.process_time() - cpu
                print(f"read from {label} (cold cache): {rate(total, took, cpu)}")
                await cold.close()
        nursery.cancel_scope.cancel()
    await store.close()


@contextlib.asynccontextmanager
async def rss_watch() -> AsyncIterator[list[int]]:
    """[RSS at the start, peak RSS] of this process (bookie, client and offloader) over the
    block, sampled every 20 ms from /proc/self/statm."""
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    seen = [rss(), rss()]

    async def sample() -> None:
        while True:
            seen[1] = max(seen[1], rss())
            await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample)
        yield seen
        nursery.cancel_scope.cancel()
    seen[1] = max(seen[1], rss())


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    print(load())
    argv = sys.argv[1:]
    runs = 1
    if "--runs" in argv:
        at = argv.index("--runs")
        runs = int(argv[at + 1])
        del argv[at : at + 2]
    args = [a for a in argv if not a.startswith("--")]
    mb = int(args[0]) if args else 128
    flags = ("--local" in sys.argv, "--batch-only" in sys.argv, runs)
    with tempfile.TemporaryDirectory() as tmp:
        if "--s3" in sys.argv:
            from tests.offload.moto_server import moto_s3
            with moto_s3("ledgers") as endpoint:
                trio.run(bench, mb, Path(tmp), endpoint, *flags)
        else:
            trio.run(bench, mb, Path(tmp), None, *flags)
    print(load())


if __name__ == "__main__":
    main()
