"""Log compaction: throughput, size reduction, and table-restore time before and after.

Builds one compacted partition in process (TopicService over the in-memory metadata store
and MemoryBookKeeper, so the figures are the compactor's CPU and ledger-swap cost, not bookie
disk time): `--records` updates spread evenly over `--keys` keys, written as batches of
`--batch` records (uncompressed, ~60-byte values), ledgers rolled at `--segment-bytes`. Then:

- restore "before": a Kafka Connect-style table restore -- read every batch from the log
  start through PartitionLog.read (the Fetch path), decode its records, keep the latest
  value per key -- timed;
- one forced compaction pass, timed: MB/s of input (the cleanable ledgers' bytes) and the
  size before/after;
- restore "after", timed, and checked to give the same table;
- a second pass after 50% more updates (steady state: the clean ledgers' keys are not mapped
  again, only their records filtered), timed.

    python benchmarks/bench_compaction.py                      # 200k records over 10k keys
    python benchmarks/bench_compaction.py --records 1000000    # the issue's workload

This is a measuring tool: it must never be imported by the package.
"""

from __future__ import annotations

import argparse
import time

import trio

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka import record_batch as rb


async def restore(plog) -> tuple[dict[bytes, bytes | None], float, int]:  # type: ignore[no-untyped-def]
    """The table (latest value per key), seconds taken, bytes read."""
    started = time.perf_counter()
    table: dict[bytes, bytes | None] = {}
    offset, nbytes = plog.log_start_offset, 0
    while offset < plog.high_watermark:
        batches = await plog.read(offset, 1 << 20)
        if not batches:
            break
        for batch in batches:
            nbytes += len(batch)
            for record in rb.decode_records(batch):
                if record.offset >= offset and record.key is not None:
                    table[record.key] = record.value
            offset = rb.parse_header(batch).last_offset + 1
    return table, time.perf_counter() - started, nbytes


async def main(args: argparse.Namespace) -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        topics = TopicService(store, ManagedLedgerFactory(store, bk), TopicServiceConfig(
            compaction_max_bytes_per_s=None))
        await topics.load()
        await topics.create_topic("table", 1, {
            "cleanup.policy": "compact", "segment.bytes": str(args.segment_bytes),
            "min.cleanable.dirty.ratio": "0.01"})
        plog = await topics.partition("table", 0)
        started = time.perf_counter()
        written = 0
        for first in range(0, args.records, args.batch):
            pairs = [(b"key-%06d" % (i % args.keys), b"value-%09d-" % i + b"x" * 40)
                     for i in range(first, min(args.records, first + args.batch))]
            batch = rb.build_batch(pairs)
            written += len(batch)
            await plog.append(batch)
        print(f"wrote {args.records} records over {args.keys} keys: {written / 1e6:.1f} MB "
              f"in {time.perf_counter() - started:.1f} s, {len(plog.ledger.ledgers)} ledgers")
        before, before_s, before_bytes = await restore(plog)
        print(f"restore before: {before_s:.2f} s ({before_bytes / 1e6:.1f} MB read, "
              f"{len(before)} keys)")
        started = time.perf_counter()
        [result] = await topics.compaction.compact_topic("table")
        took = time.perf_counter() - started
        print(f"compaction: {result['bytes_before'] / 1e6:.1f} MB -> "
              f"{result['bytes_after'] / 1e6:.2f} MB of cleanable ledgers "
              f"({result['records_before']} -> {result['records_after']} records) in "
              f"{took:.2f} s = {result['bytes_before'] / 1e6 / took:.1f} MB/s of input")
        after, after_s, after_bytes = await restore(plog)
        total_after = sum(info.size for info in plog.ledger.ledgers)
        print(f"partition size: {written / 1e6:.1f} MB -> {total_after / 1e6:.2f} MB "
              f"({100 * (1 - total_after / written):.1f}% smaller; the open ledger is never "
              f"compacted)")
        print(f"restore after: {after_s:.2f} s ({after_bytes / 1e6:.2f} MB read), "
              f"{before_s / after_s:.1f}x faster")
        assert after == before, "the compacted table differs"
        more = args.records // 2
        for first in range(args.records, args.records + more, args.batch):
            pairs = [(b"key-%06d" % (i % args.keys), b"value-%09d-" % i + b"x" * 40)
                     for i in range(first, min(args.records + more, first + args.batch))]
            await plog.append(rb.build_batch(pairs))
        started = time.perf_counter()
        [second] = await topics.compaction.compact_topic("table")
        took = time.perf_counter() - started
        print(f"second pass after {more} more updates: {second['bytes_before'] / 1e6:.1f} MB "
              f"-> {second['bytes_after'] / 1e6:.2f} MB in {took:.2f} s = "
              f"{second['bytes_before'] / 1e6 / took:.1f} MB/s of input")
        await topics.close()
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=4 << 20)
    trio.run(main, parser.parse_args())
