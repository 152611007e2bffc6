"""Crash-test driver for the one-transaction close, on a durable bookie and the on-disk store.

    python -m tests.managed_ledger.close_crash_driver DATA_DIR PORT write|verify

`write` appends ENTRIES acknowledged entries, prints "ACKED", then closes the managed ledger
(the test sets LEDGERWIRE_CRASH_AT to kill it at a close step) and prints "DONE".  `verify`
prints one JSON line: the list's records and the last ledger's state as stored, then the
entries a new owner reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from tests.managed_ledger.crash_support import durable_node, emit, stored_list

NAME = "public/default/closing-0"
ENTRIES = 5


async def main(data_dir: Path, port: int, phase: str) -> None:
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk)
        if phase == "verify":
            records, states = await stored_list(store, NAME)
            state = states[int(records[-1][0])]
        ml = await factory.open(NAME, ManagedLedgerConfig())
        if phase == "write":
            for i in range(ENTRIES):
                await ml.append(b"e%d" % i)
            emit("ACKED")
            await ml.close()
            emit("DONE")
        else:
            start = Position(ml.ledgers[0].ledger_id, 0)
            entries = [e.data.decode() for e in await ml.read(start, 100)]
            emit(json.dumps({"records": records, "last_state": state, "entries": entries}))
            await ml.close()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
