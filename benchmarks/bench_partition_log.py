"""Per-append overhead of PartitionLog over a bare ManagedLedger, on MemoryBookKeeper.

Appends N batches of one 128 KB record each (a) straight to a ManagedLedger and (b) through
PartitionLog.append (header parse, CRC-32C check, producer checks, base-offset patch, tail
cache, index), sequentially and with 16 concurrent producers, and prints appends/s and the
microseconds each layer costs.  Run: `python benchmarks/bench_partition_log.py [N]`.
"""

from __future__ import annotations

import sys
import time

import trio

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.record_batch import build_batch

BATCH_BYTES = 128 * 1024


async def bench(n: int) -> None:
    store = await open_store("memory:")
    bk = MemoryBookKeeper(store)
    factory = ManagedLedgerFactory(store, bk)
    payload = build_batch([(None, b"x" * BATCH_BYTES)], timestamp_ms=1)
    idem = [
        build_batch(
            [(None, b"x" * BATCH_BYTES)],
            producer_id=1,
            producer_epoch=0,
            base_sequence=i,
            timestamp_ms=1,
        )
        for i in range(n)
    ]

    ml = await factory.open("bench/raw")
    start = time.perf_counter()
    for _ in range(n):
        await ml.append(payload)
    raw = time.perf_counter() - start
    await ml.close()
    await factory.delete("bench/raw")
    # The copy any offset-patching layer must make (fresh 128 KB objects cost page faults).
    ml = await factory.open("bench/copy")
    view = memoryview(payload)
    start = time.perf_counter()
    for i in range(n):
        await ml.append(i.to_bytes(8, "big") + view[8:])
    raw_copy = time.perf_counter() - start
    await ml.close()
    await factory.delete("bench/copy")

    topics = TopicService(store, factory, TopicServiceConfig(max_entries_per_ledger=10_000))
    await topics.create_topic("bench", 1)
    plog = await topics.partition("bench", 0)
    start = time.perf_counter()
    for _ in range(n):
        await plog.append(payload)
    plain = time.perf_counter() - start
    start = time.perf_counter()
    for b in idem:
        await plog.append(b)
    idempotent = time.perf_counter() - start

    async def producer(batches: list[bytes]) -> None:
        for b in batches:
            await plog.append(b)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(producer, [payload] * (n // 16))
    concurrent = time.perf_counter() - start
    start = time.perf_counter()
    for offset in range(plog.high_watermark):
        await plog.read(offset, 1 << 20)
    reads = time.perf_counter() - start
    plog_hw = plog.high_watermark
    await topics.close()

    def line(label: str, seconds: float, count: int) -> None:
        print(f"{label:<44} {count / seconds:>10,.0f} appends/s  {seconds / count * 1e6:>8.1f} us")

    print(f"{n} appends of one {BATCH_BYTES // 1024} KB record, MemoryBookKeeper")
    line("ManagedLedger.append, same bytes each time", raw, n)
    line("ManagedLedger.append, a fresh patched copy", raw_copy, n)
    line("PartitionLog.append", plain, n)
    line("PartitionLog.append, idempotent producer", idempotent, n)
    line("PartitionLog.append, 16 concurrent producers", concurrent, n // 16 * 16)
    line("PartitionLog.read (tail cache / ledger)", reads, plog_hw)
    print(
        f"PartitionLog per-append overhead over a bare append of a patched copy: "
        f"{(plain - raw_copy) / n * 1e6:.1f} us"
    )


if __name__ == "__main__":
    trio.run(bench, int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
