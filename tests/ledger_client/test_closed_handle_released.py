"""A closed write handle is not kept alive by its deadline watchdog (issue 16).

Each written ledger's watchdog slept until its oldest add's deadline (4 x timeout_s) even once
that add was acknowledged, and kept the handle (with its last add) for that long after a close:
idle unloading closes hundreds of partitions a second, each holding its handle ~40 s more.
"""

from __future__ import annotations

import gc
import weakref

import trio
import trio.testing

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import running_bookies


async def test_a_closed_handle_is_released_before_its_add_deadline() -> None:
    store = await open_store("memory:")
    try:
        async with running_bookies(store, 1), \
                BookKeeper(store, timeout_s=60, local_bookies=True,
                           explicit_lac_delay_s=0) as bk:  # fmt: skip
            writer = await bk.create_ledger(1, 1, 1)
            assert await writer.append(b"one") == 0
            await writer.close()
            await trio.testing.wait_all_tasks_blocked()
            released = weakref.ref(writer)
            del writer
            gc.collect()
            assert released() is None, "the closed handle is still referenced (its watchdog?)"
    finally:
        await store.close()
