"""Write handles share their client's two timer tasks (client/handle_timers.py, issue 16).

Each new ledger started a deadline watchdog on its first add and a LAC sender after every
pause in adds: writing one record to each of thousands of partitions started two tasks per
partition, ~10% of a first open.  Every handle's deadline still fails it, and every paused
handle's LAC still reaches the bookies, from one task each for the whole client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from ledger_backend.client.bookkeeper import BookKeeper, WriteHandle
from ledger_backend.client.errors import BKTimeoutError
from ledger_backend.metadata import MetadataStore
from tests.ledger_client.bookie_cluster import (
    InProcessCluster,
    memory_store,
    running_bookies,
    silent_bookie,
)

LEDGERS = 40


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    async with memory_store() as fresh:
        yield fresh


@pytest.mark.timeout(60)
async def test_many_written_ledgers_share_two_timer_tasks(store: MetadataStore) -> None:
    async with running_bookies(store, 1) as cluster, \
            BookKeeper(store, timeout_s=5, explicit_lac_delay_s=0.5) as bk:
        nursery = bk.context.nursery
        handles = [await bk.create_ledger(1, 1, 1) for _ in range(LEDGERS)]
        before = len(timer_tasks(nursery))
        async with trio.open_nursery() as writers:
            for handle in handles:
                for i in range(2):
                    writers.start_soon(handle.append, b"entry-%d" % i)
        # every handle paused with a LAC the bookies did not hear (1: only 0 was carried)
        assert len(timer_tasks(nursery)) - before <= 2  # was two per handle
        with trio.fail_after(10):  # (the bookies' state has no event to wait on)
            while any(lac(h, cluster) != 1 for h in handles):  # noqa: ASYNC110
                await trio.sleep(0.05)
        for handle in handles:
            await handle.close()


def lac(handle: WriteHandle, cluster: InProcessCluster) -> int:
    return cluster.storage(handle.metadata.current_ensemble[0]).last_add_confirmed(
        handle.ledger_id)


def timer_tasks(nursery: trio.Nursery) -> list[trio.lowlevel.Task]:
    """The client's tasks other than its bookie connections (started by the first add)."""
    return [t for t in nursery.child_tasks if "BookieConnection" not in t.name]


async def test_each_handle_still_fails_at_its_own_deadline(
        store: MetadataStore, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        await silent_bookie(store, nursery)
        async with BookKeeper(store, timeout_s=10) as bk:
            early, late = await bk.create_ledger(1, 1, 1), await bk.create_ledger(1, 1, 1)
            failed: dict[str, float] = {}
            started = trio.current_time()

            async def add(name: str, handle: object, after: float) -> None:
                await trio.sleep(after)
                with pytest.raises(BKTimeoutError):
                    await handle.append(b"never stored")  # type: ignore[attr-defined]
                failed[name] = trio.current_time() - started

            async with trio.open_nursery() as adds:  # nobody answers: 4 client timeouts each
                adds.start_soon(add, "early", early, 0)
                adds.start_soon(add, "late", late, 15)
            assert 40 <= failed["early"] < 45 and 55 <= failed["late"] < 60
        nursery.cancel_scope.cancel()
