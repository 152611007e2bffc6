"""Crash-test driver for managed-ledger rewrites, on a durable bookie and the on-disk store.

    python -m tests.managed_ledger.rewrite_crash_driver DATA_DIR PORT write|compact|verify

`write` appends 6 updates of each of 12 keys ("k<key>=<update>", 8 entries a ledger) and
closes cleanly. `compact` rewrites every closed ledger, runs of two, keeping the latest update
of each key; the test sets LEDGERWIRE_CRASH_AT to kill it (SIGKILL) at a rewrite step.
`verify` opens the managed ledger as a new owner and prints one JSON line: the entries in log
order, the node's pending/garbage lists and every ledger id the ledger client still knows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from tests.managed_ledger.crash_support import durable_node, emit

NAME = "public/default/table-0"
ROOT = "/ledgerwire/managed-ledgers"
KEYS, UPDATES = 12, 6


async def main(data_dir: Path, port: int, phase: str) -> None:
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk)
        ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=8))
        if phase == "write":
            for update in range(UPDATES):
                for key in range(KEYS):
                    await ml.append(b"k%d=%d" % (key, update))
        elif phase == "compact":
            await compact(ml)
            emit("DONE")
        else:
            await verify(ml, store, bk)
        await ml.close()


async def compact(ml) -> None:  # type: ignore[no-untyped-def]
    closed = [info for info in ml.ledgers[:-1] if info.entries > 0]
    entries = []
    for info in closed:
        entries.extend(await ml.read(Position(info.ledger_id, 0), info.entries))
    latest = {e.data.split(b"=")[0]: e.position for e in entries}
    keep = set(latest.values())
    rewrite = ml.rewrite()
    for i in range(0, len(closed), 2):
        run = [info.ledger_id for info in closed[i : i + 2]]
        for entry in entries:
            if entry.position.ledger_id in run and entry.position in keep:
                await rewrite.write(entry.position, entry.data)
        await rewrite.end_run(run)
    await rewrite.commit()


async def verify(ml, store, bk) -> None:  # type: ignore[no-untyped-def]
    first = ml.first_position
    datas = [] if first is None else [e.data.decode() for e in await ml.read(first, 10_000)]
    path = managed_ledger_path(ROOT, NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    emit(json.dumps({
        "entries": datas,
        "pending": node.pending,
        "garbage": node.garbage,
        "listed": [r.ledger_id for r in node.ledgers],
        "known": sorted(await bk.list_ledgers()),
    }))


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
