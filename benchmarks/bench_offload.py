"""Tiered storage throughput: offloading to a directory, and reads of offloaded vs bookie data.

A managed ledger on one durable in-process bookie (on-disk journal and entry log) gets
N MB of 16 KB entries in 8 MB ledgers. Then (a) every closed ledger is read through the
managed ledger from the bookie, (b) every closed ledger is offloaded to a directory (read
from the bookie, encoded, written with fsync, read back and compared) and the bookie copies
deleted, (c) the same reads are served from the objects (cold cache: a fresh factory).
Prints MB/s of each, and of (b) without the bookie read.
Run: `python benchmarks/bench_offload.py [MB] [--s3]` (--s3 also offloads to moto's S3
server, which is slow Python: a functional figure, not a store's).
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from pathlib import Path

import trio

from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from ledger_backend.metadata import open_store
from ledger_backend.offload import FilesystemOffloader, Offloader
from ledger_backend.offload.object_format import encode_object

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


async def bench(mb: int, tmp: Path, s3_endpoint: str | None) -> None:
    store = await open_store(str(tmp / "meta"))
    port = free_port()
    config = BookieStorageConfig(data_dir=tmp / "bookie", flush_interval_s=0.05,
                                 disk_check_interval_s=3600.0)
    async with open_bookie_storage(config) as storage, trio.open_nursery() as nursery:
        await nursery.start(serve_bookie, storage, store, "127.0.0.1", port)
        async with BookKeeper(store, timeout_s=30) as bk:
            factory = ManagedLedgerFactory(store, bk)
            ml = await factory.open("bench/tiered", CONFIG)
            payload = b"x" * ENTRY
            async with trio.open_nursery() as writers:
                for _ in range(16):
                    async def write(count: int = mb * (1 << 20) // ENTRY // 16) -> None:
                        for _ in range(count):
                            await ml.append(payload)
                    writers.start_soon(write)
            await factory.close()

            total, took = await read_closed(ManagedLedgerFactory(store, bk), "bench/tiered")
            print(f"read from bookie:        {total / took / 1e6:8.1f} MB/s ({total >> 20} MB)")

            offloaders: list[tuple[str, Offloader]] = [
                ("filesystem", FilesystemOffloader(tmp / "tier"))]
            if s3_endpoint is not None:
                from ledger_backend.offload.object_store import ObjectStoreOffloader
                offloaders.append(("s3 (moto)", ObjectStoreOffloader.s3(
                    "ledgers", endpoint=s3_endpoint, access_key_id="x", secret_access_key="x")))
            for label, offloader in offloaders:
                name = f"bench/{label.split()[0]}"
                source = await ManagedLedgerFactory(store, bk).open(name, CONFIG)
                for _ in range(min(mb, 64) * (1 << 20) // ENTRY):
                    await source.append(payload)
                await source.close()
                factory = ManagedLedgerFactory(store, bk, offloader=offloader)
                ml = await factory.open(name, CONFIG)
                size = sum(i.size for i in ml.ledgers if i.closed)
                start = time.perf_counter()
                await ml.offload()
                took = time.perf_counter() - start
                await ml.delete_offloaded_bookie_copies(0)
                await factory.close()
                print(f"offload to {label:13s}: {size / took / 1e6:8.1f} MB/s "
                      f"({size >> 20} MB, read + encode + write + verify)")
                entries = [payload] * (size // ENTRY)
                start = time.perf_counter()
                data = await trio.to_thread.run_sync(encode_object, 1, entries)
                await offloader.put("bench/encode-only.lwo", data)
                assert await offloader.get_range("bench/encode-only.lwo", 0, len(data)) == data
                took = time.perf_counter() - start
                print(f"  of which encode + write + verify: {size / took / 1e6:8.1f} MB/s "
                      "(entries already in memory; the rest is the bookie read)")
                cold = ManagedLedgerFactory(store, bk, offloader=offloader)
                total, took = await read_closed(cold, name)
                print(f"read from {label:14s}: {total / took / 1e6:8.1f} MB/s (cold cache)")
                await cold.close()
        nursery.cancel_scope.cancel()
    await store.close()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mb = int(args[0]) if args else 128
    with tempfile.TemporaryDirectory() as tmp:
        if "--s3" in sys.argv:
            from tests.offload.moto_server import moto_s3
            with moto_s3("ledgers") as endpoint:
                trio.run(bench, mb, Path(tmp), endpoint)
        else:
            trio.run(bench, mb, Path(tmp), None)


if __name__ == "__main__":
    main()
