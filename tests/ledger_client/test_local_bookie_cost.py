"""What an add to a bookie of this process costs the scheduler: tasks spawned and task steps
(exact, unlike timings on a shared machine).

The in-process connection hands each request to a parked worker task instead of spawning a
task per request; outcomes (in-order acks, fencing, timeouts) stay those of the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.request_answers import BookieAnswers
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from tests.ledger_client.bookie_cluster import running_bookies

APPENDS = 50


class SchedulerCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0
        self.steps = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        # tasks that answer requests (the deadline sweeper may come and go with the load)
        if "LocalBookieConnection" in task.name and "sweep" not in task.name:
            self.spawned += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def counted_appends(writer: Any) -> SchedulerCounter:
    """APPENDS lone appends after three warm ones, counted; their ids checked."""
    counter = SchedulerCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        with trio.fail_after(10):
            ids = [await writer.append(b"entry %d" % i) for i in range(APPENDS)]
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert ids == list(range(3, 3 + APPENDS))
    return counter


@pytest.fixture
async def store() -> MetadataStore:
    return await open_store("memory:")


async def test_local_adds_spawn_no_task_per_entry(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as _cluster, \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(3, 3, 2)
        for _ in range(3):  # connections, workers and the deadline watcher exist after these
            await writer.append(b"warm")
        counter = await counted_appends(writer)
        # three bookies a write: it was 3 tasks spawned per append
        assert counter.spawned == 0, counter.spawned
        assert counter.steps / APPENDS < 11, counter.steps / APPENDS  # unchanged: 10 (+sweeps)


async def test_concurrent_local_adds_are_acked_in_order(store: MetadataStore) -> None:
    async with running_bookies(store, 2) as _cluster, \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(2, 2, 2)
        acked: list[int] = []

        async def add(i: int) -> None:
            acked.append(await writer.append(b"e%d" % i))

        with trio.fail_after(10):
            for _round in range(3):
                async with trio.open_nursery() as nursery:
                    for i in range(20):
                        nursery.start_soon(add, i)
        assert sorted(acked) == list(range(60))


class SilentStorage(MemoryBookieStorage):
    """Adds that never finish (a bookie stuck in its journal)."""

    silent = False

    async def add_entry(self, ledger_id: int, entry_id: int, lac: int, data: bytes, *,
                        recovery_add: bool = False) -> None:  # fmt: skip
        if self.silent:
            await trio.sleep_forever()
        await super().add_entry(ledger_id, entry_id, lac, data, recovery_add=recovery_add)


async def test_a_stuck_local_add_still_times_out(
    store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    storage = SilentStorage()
    async with running_bookies(store, 1, make_storage=lambda: storage), \
            BookKeeper(store, timeout_s=0.3, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        await writer.append(b"before")  # a worker is parked now
        storage.silent = True
        with trio.fail_after(10), pytest.raises(LedgerError):
            await writer.append(b"stuck")  # timed out, then no bookie to replace the silent one
        assert "no answer in time" in caplog.text


@pytest.mark.parametrize("fast", [True, False])
async def test_durable_local_adds_are_answered_by_the_journal(
    store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """An add the bookie's storage takes at once is answered from its journal group's
    completion, without a worker task: fewer task steps per lone add, same answers."""
    if not fast:
        monkeypatch.setattr(BookieAnswers, "start_add", lambda *_args: False)
    async with open_bookie_storage(BookieStorageConfig(tmp_path / "b0", fsync=False)) as disk, \
            running_bookies(store, 1, make_storage=lambda: disk), \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        for _ in range(3):  # the ledger's key is known after the first add
            await writer.append(b"warm")
        counter = await counted_appends(writer)
        assert counter.spawned == 0
        if fast:
            assert counter.steps / APPENDS < 4.6, counter.steps / APPENDS  # 5 with a worker
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        last = 3 + APPENDS - 2  # the last one is beyond the LAC the bookie has heard
        assert await reader.read(last, last) == [b"entry %d" % (APPENDS - 2)]


async def test_a_local_add_answered_by_the_journal_waits_for_its_fsync(
    store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The add taken without a worker task (start_add) is acknowledged to the writer only once
    the journal's fdatasync of its group returned."""
    import os

    async with open_bookie_storage(BookieStorageConfig(tmp_path / "b0", fsync=True)) as disk, \
            running_bookies(store, 1, make_storage=lambda: disk), \
            BookKeeper(store, timeout_s=30, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        await writer.append(b"warm")  # the ledger's key is known after the first add
        taken: list[bool] = []
        real_start_add = BookieAnswers.start_add

        def start_add(self: BookieAnswers, *args: Any) -> bool:
            taken.append(real_start_add(self, *args))
            return taken[-1]

        monkeypatch.setattr(BookieAnswers, "start_add", start_add)
        assert disk.journal is not None
        journal_fd = disk.journal._fd
        synced, gate = trio.Event(), trio.Event()
        token = trio.lowlevel.current_trio_token()
        real_fdatasync = os.fdatasync

        def held_fdatasync(fd: int) -> None:
            if fd == journal_fd:
                trio.from_thread.run_sync(synced.set, trio_token=token)
                trio.from_thread.run(gate.wait, trio_token=token)
            real_fdatasync(fd)

        monkeypatch.setattr(os, "fdatasync", held_fdatasync)
        acked: list[int] = []

        async def add() -> None:
            acked.append(await writer.append(b"held"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add)
            try:
                with trio.fail_after(10):
                    await synced.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert acked == [] and taken == [True]  # written, not fsynced: not acked
            finally:
                gate.set()  # else the journal's write never ends and nothing can close
        assert acked == [1]
