"""A ledger writer to be killed: run as a subprocess by the replication tests.

    python tests/ledger_client/ledger_writer_process.py METADATA_URL [WINDOW]

Creates a ledger (E=3 Qw=2 Qa=2), prints `LEDGER <id>`, then appends entries made by
`entry_payload(seq)` forever with WINDOW appends in flight, printing `ACK <entry id> <seq>`
(flushed) for every acknowledged entry, in acknowledgement order. It never exits by itself.
"""

from __future__ import annotations

import sys

import trio
import trio.lowlevel


def entry_payload(seq: int) -> bytes:
    return (b"entry-%08d|" % seq) * 20


async def write_forever(url: str, window: int) -> None:
    from ledger_backend.client.bookkeeper import BookKeeper
    from ledger_backend.metadata import open_store

    store = await open_store(url)
    async with BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(3, 2, 2)
        print(f"LEDGER {wh.ledger_id}", flush=True)
        limiter = trio.Semaphore(window)
        next_seq = 0

        async def add(seq: int) -> None:
            entry_id = await wh.append(entry_payload(seq))
            print(f"ACK {entry_id} {seq}", flush=True)
            limiter.release()

        async with trio.open_nursery() as nursery:
            while True:
                await limiter.acquire()
                nursery.start_soon(add, next_seq)  # tasks start in any order: hence seq
                next_seq += 1
                await trio.lowlevel.checkpoint()


if __name__ == "__main__":
    trio.run(write_forever, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 16)
