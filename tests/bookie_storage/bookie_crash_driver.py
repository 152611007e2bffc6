"""Crash-test driver: runs the bookie storage engine and prints what it acknowledged.

    python bookie_crash_driver.py DATA_DIR RUN_ID SECONDS

Writes entries to ledgers RUN_ID*100 + 1..4 (printing ``A <ledger> <entry>`` as each add_entry
returns, flushed), fences ledger RUN_ID*100 + 9 (``F <ledger>`` once fence returns), and keeps
victim ledgers (ids >= 1_000_000, never verified) that it deletes, with GC and compaction
running often, so every crash point of the engine gets hit.  Exits 0 after SECONDS if nothing
killed it.  The test kills it (LEDGERWIRE_CRASH_AT or SIGKILL) and checks the printed
acknowledgements against a reopened engine.  It must never print an ack before add_entry
returned.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import trio

from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


def entry_payload(ledger: int, entry: int) -> bytes:
    rng = random.Random(ledger * 1_000_003 + entry)
    return rng.randbytes(rng.choice((50, 700, 4000, 20000)))


def crash_config(data_dir: Path) -> BookieStorageConfig:
    return BookieStorageConfig(
        data_dir=data_dir,
        journal_max_group_wait_s=0.001,
        journal_max_file_bytes=256 * 1024,
        entry_log_max_bytes=128 * 1024,
        write_cache_bytes=512 * 1024,
        read_cache_bytes=1 << 20,
        flush_interval_s=0.05,
        gc_interval_s=0,
        disk_check_interval_s=3600.0,
        # overlapping group writes, zero fills several times a file and checkpoints in steps,
        # so the crash points of each are hit among the others
        journal_writes_in_flight=2,
        journal_preallocate_bytes=64 * 1024,
        entry_log_sync_bytes=16 * 1024,
    )


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: Path, run_id: int, seconds: float) -> None:
    async with open_bookie_storage(crash_config(data_dir)) as storage:
        emit("OPEN")

        async def writer(ledger: int) -> None:
            entry = 0
            while True:
                await storage.add_entry(ledger, entry, entry - 1, entry_payload(ledger, entry))
                emit(f"A {ledger} {entry}")
                entry += 1

        async def fencer(ledger: int) -> None:
            for entry in range(5):
                await storage.add_entry(ledger, entry, entry - 1, entry_payload(ledger, entry))
                emit(f"A {ledger} {entry}")
            await storage.fence(ledger)
            emit(f"F {ledger}")

        async def victims() -> None:
            victim = 1_000_000 + run_id * 1000
            while True:
                for entry in range(40):
                    await storage.add_entry(victim, entry, entry - 1, entry_payload(victim, entry))
                await storage.checkpoint()
                await storage.delete_ledger(victim)
                await storage.gc.collect()
                await storage.gc.compact(0.99)
                victim += 1

        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for i in range(1, 5):
                    nursery.start_soon(writer, run_id * 100 + i)
                nursery.start_soon(fencer, run_id * 100 + 9)
                nursery.start_soon(victims)
    emit("CLOSED")


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
