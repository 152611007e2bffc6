"""What a request over a bookie TCP connection costs the client's writer task, in task steps
(exact, unlike timings on a shared machine), and that writing from `submit` loses nothing.

A lone request on an idle connected socket is written by `submit` itself; the writer task
(woken, a batching checkpoint, its send: three steps) only takes queued frames and whatever
the socket did not accept at once.
"""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from tests.ledger_client.bookie_cluster import running_bookies

APPENDS = 30


class WriterTaskSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("BookieConnection._write_loop"):
            self.steps += 1


@pytest.fixture
async def store() -> MetadataStore:
    return await open_store("memory:")


async def test_a_lone_add_wakes_no_writer_task(store: MetadataStore) -> None:
    # no explicit-LAC timer: on a loaded machine an append slower than its delay (0.2 s) would
    # put a LAC request in flight beside the next add, which then rightly goes to the writer
    async with running_bookies(store, 2) as _cluster, \
            BookKeeper(store, timeout_s=5, explicit_lac_delay_s=0) as bk:  # fmt: skip
        writer = await bk.create_ledger(2, 2, 2)
        for _ in range(3):  # connect first
            await writer.append(b"warm")
        counter = WriterTaskSteps()
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(10):
                ids = [await writer.append(b"entry %d" % i) for i in range(APPENDS)]
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert ids == list(range(3, 3 + APPENDS))
        # it was 3 steps per append and bookie (6 here)
        assert counter.steps == 0, counter.steps / APPENDS
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(3, 4) == [b"entry 0", b"entry 1"]


async def test_a_frame_larger_than_the_socket_buffer_is_finished_by_the_writer(
    store: MetadataStore,
) -> None:
    async with running_bookies(store, 1) as _cluster, \
            BookKeeper(store, timeout_s=10) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        await writer.append(b"warm")  # connected and idle: the next submit writes itself
        big = bytes(range(256)) * (16 * 1024)  # 4 MiB: far more than one non-blocking write
        with trio.fail_after(20):
            assert await writer.append(big) == 1
            assert await writer.append(b"after") == 2
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(1, 2) == [big, b"after"]


async def test_concurrent_adds_after_a_direct_write_keep_their_order(
    store: MetadataStore,
) -> None:
    async with running_bookies(store, 3) as _cluster, \
            BookKeeper(store, timeout_s=5) as bk:  # fmt: skip
        writer = await bk.create_ledger(3, 2, 2)
        acked: list[int] = []

        async def add(i: int) -> None:
            acked.append(await writer.append(b"e%d" % i))

        with trio.fail_after(10):
            for _round in range(5):
                await add(-1)  # a lone add (written by submit), then a burst (queued)
                async with trio.open_nursery() as nursery:
                    for i in range(10):
                        nursery.start_soon(add, i)
        assert sorted(acked) == list(range(55))
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert len(await reader.read(0, 54)) == 55
