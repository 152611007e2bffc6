"""Write committed offsets into a stopped standalone's data directory as a one-process
standalone did before session 15: in the single ledger `__system/offsets/__consumer_offsets`
(what `LedgerOffsetStore`'s default name still is), on the node's own bookies and store.

    python -m tests.integration.legacy_layout_driver DATA_DIR BOOKIE_PORT BOOKIES GROUP TOPIC \
        PARTITION=OFFSET...

Prints "DONE" once the offsets are durable and everything is closed.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path

import trio

from gateway.config.settings import Config, StorageConfig
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.process.local_bookies import start_local_bookies
from gateway.process.standalone import system_ledger_config
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset


async def main(data_dir: Path, bookie_port: int, bookies: int, group: str, topic: str,
               offsets: dict[int, int]) -> None:
    config = Config(data_dir=data_dir, storage=replace(StorageConfig(), bookies=bookies,
                                                       bookie_port=bookie_port))
    async with AsyncExitStack() as stack:
        store = await open_store(f"embedded:{data_dir / 'metadata'}")
        stack.push_async_callback(store.close)
        bookkeeper = await stack.enter_async_context(BookKeeper(store, local_bookies=True))

        async def active_ledgers() -> set[int]:
            return set(await bookkeeper.list_ledgers())

        await start_local_bookies(config, store, stack, active_ledgers, None, BookieTls())
        factory = ManagedLedgerFactory(store, bookkeeper)
        stack.push_async_callback(factory.close)
        legacy = LedgerOffsetStore(factory, system_ledger_config(config))
        await legacy.load()
        await legacy.commit(group, {(topic, p): CommittedOffset(o, -1, "", 1_000)
                                    for p, o in offsets.items()})
        await legacy.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    pairs = dict(arg.split("=") for arg in sys.argv[6:])
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
             sys.argv[5], {int(p): int(o) for p, o in pairs.items()})
