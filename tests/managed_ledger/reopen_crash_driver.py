"""Crash-test driver for a new owner's one-transaction list write, on a durable bookie and the
on-disk store.

    python -m tests.managed_ledger.reopen_crash_driver DATA_DIR PORT write|reopen|verify

`write` appends ENTRIES acknowledged entries, prints "ACKED" and kills itself (kill -9: its
ledger is left OPEN).  `reopen` opens it as the next owner (the test sets LEDGERWIRE_CRASH_AT to
kill it at a step of factory._list_next_ledger), appends one more entry and prints "DONE"
without closing.  `verify` prints one JSON line: the list's records and the ledgers' states as
stored, every ledger the store holds, then the entries a third owner reads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import trio

from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from tests.managed_ledger.crash_support import durable_node, emit, stored_list

NAME = "public/default/reopened-0"
ENTRIES = 5


async def main(data_dir: Path, port: int, phase: str) -> None:
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk)
        if phase == "verify":
            records, states = await stored_list(store, NAME)
            stored = sorted(await bk.list_ledgers())
        ml = await factory.open(NAME, ManagedLedgerConfig())
        if phase == "write":
            for i in range(ENTRIES):
                await ml.append(b"e%d" % i)
            emit("ACKED")
            os.kill(os.getpid(), signal.SIGKILL)
        elif phase == "reopen":
            await ml.append(b"e%d" % ENTRIES)
            emit("DONE")
        else:
            start = Position(ml.ledgers[0].ledger_id, 0)
            entries = [e.data.decode() for e in await ml.read(start, 100)]
            emit(json.dumps({"records": records, "states": states, "stored": stored,
                             "entries": entries}))
            await ml.close()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
