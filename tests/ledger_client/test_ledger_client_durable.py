"""The ledger client against bookies backed by the real storage engine (fsync on), in-process."""

from __future__ import annotations

from pathlib import Path

import trio

from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerFencedError
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import running_bookies


async def test_write_recover_read_on_durable_bookies(tmp_path: Path) -> None:
    store = await open_store("memory:")
    try:
        async with (
            open_bookie_storage(BookieStorageConfig(tmp_path / "b0")) as s0,
            open_bookie_storage(BookieStorageConfig(tmp_path / "b1")) as s1,
            open_bookie_storage(BookieStorageConfig(tmp_path / "b2")) as s2,
        ):
            storages = iter([s0, s1, s2])
            async with running_bookies(store, 3, lambda: next(storages)), \
                    BookKeeper(store, timeout_s=5) as bk_a, \
                    BookKeeper(store, timeout_s=5) as bk_b:  # fmt: skip
                writer = await bk_a.create_ledger(3, 2, 2)
                payloads = [bytes([i % 251]) * (100 + i) for i in range(50)]
                results: dict[int, int] = {}

                async def add(i: int) -> None:
                    results[i] = await writer.append(payloads[i])

                async with trio.open_nursery() as nursery:
                    for i in range(50):
                        nursery.start_soon(add, i)
                rh = await bk_b.open_ledger(writer.ledger_id, recovery=True)
                assert rh.last_add_confirmed == 49
                entries = await rh.read(0, 49)
                assert all(entries[results[i]] == payloads[i] for i in range(50))
                assert rh.metadata.length == sum(len(p) for p in payloads)
                try:
                    await writer.append(b"fenced?")
                    raise AssertionError("the fenced writer's add was acknowledged")
                except LedgerFencedError:
                    pass
    finally:
        await store.close()
