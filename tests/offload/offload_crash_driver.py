"""Crash-test driver for offloading, on a durable bookie, the on-disk store and a directory.

    python -m tests.offload.offload_crash_driver DATA_DIR PORT write|offload|verify[-own]

`write` appends 40 entries (8 a ledger) and closes. `offload` offloads every closed ledger and
deletes the bookie copies with no lag; the test sets LEDGERWIRE_CRASH_AT to kill it (SIGKILL)
at a step. `verify` opens the managed ledger as a new owner, reads everything and prints one
JSON line (entries, and per offloaded ledger: its recorded size, the object's size on disk,
whether the bookies still know it), then offloads and deletes again to finish the job and
prints a second line the same way.  `offload-own` and `verify-own` offload to a directory of
the managed ledger's own (as a namespace's offload_directory), not the configured one; the
objects are counted in both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.offload import FilesystemOffloader
from tests.managed_ledger.crash_support import durable_node, emit

NAME = "public/default/tiered-0"
ROOT = "/ledgerwire/managed-ledgers"
ENTRIES = 40


def count_objects(tier: Path) -> int:
    return len(list(tier.rglob("*.lwo"))) if tier.exists() else 0


def object_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else -1


async def main(data_dir: Path, port: int, phase: str) -> None:
    tier = data_dir / "tier"
    own = FilesystemOffloader(data_dir / "own") if phase.endswith("-own") else None
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(tier))
        ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=8))
        if phase == "write":
            for i in range(ENTRIES):
                await ml.append(b"entry-%d" % i)
        elif phase.startswith("offload"):
            await ml.offload(to=own)
            await ml.delete_offloaded_bookie_copies(0)
            emit("DONE")
        else:
            await report(ml, store, bk, tier, data_dir / "own")
            await ml.offload(to=own)
            await ml.delete_offloaded_bookie_copies(0)
            await report(ml, store, bk, tier, data_dir / "own")
        await ml.close()


def recorded_at(tier: Path, location: Any) -> Path:
    return Path(dict(location)["directory"]) if location else tier


async def report(ml: Any, store: Any, bk: Any, tier: Path, own: Path) -> None:
    first = ml.first_position
    datas = [] if first is None else [e.data.decode() for e in await ml.read(first, 10_000)]
    path = managed_ledger_path(ROOT, NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    known = set(await bk.list_ledgers())
    offloaded = [
        {
            "ledger": r.ledger_id,
            "recorded_size": r.offload.size,
            "object_size": await trio.to_thread.run_sync(
                object_size, recorded_at(tier, r.offload.location) / r.offload.key),
            "bookie_deleted": r.offload.bookie_deleted,
            "on_bookies": r.ledger_id in known,
        }
        for r in node.ledgers
        if r.offload is not None
    ]
    objects = sum([await trio.to_thread.run_sync(count_objects, at) for at in (tier, own)])
    emit(json.dumps({"entries": datas, "offloaded": offloaded, "ledgers": len(node.ledgers),
                     "objects": objects, "offload_pending": node.offload_pending}))


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
