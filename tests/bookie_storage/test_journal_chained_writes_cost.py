"""What finishing a journal group write costs the journal task, in task steps (exact, unlike
timings on a shared machine).

A group's write completion (delivered to the Trio thread) releases its waiters itself and
chains the next group's write; a group opened on an idle journal is started at the end of the
scheduler's pass (the queue-empty trigger's instrument hook).  So with that trigger the journal
task takes no step per group,
neither for a lone sender nor under steady load.  Durability is unchanged: every waiter is
still released only after its group's fdatasync returned.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from ledger_backend.bookie.journal import Journal
from ledger_backend.bookie.journal_format import TYPE_ADD

GROUPS = 20


class JournalTaskSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0  # the journal task's
        self.all_steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.all_steps += 1
        if task.name.endswith("Journal.run"):
            self.steps += 1


async def test_a_lone_senders_group_costs_no_journal_task_step(tmp_path: Path) -> None:
    journal = Journal(tmp_path, first_file_id=1, flush_when_queue_empty=True)
    await journal.open()
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.append(TYPE_ADD, 1, 0, -1, b"warm")
        counter = JournalTaskSteps()
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(10):
                for entry in range(1, GROUPS + 1):
                    await journal.append(TYPE_ADD, 1, entry, entry - 1, b"x" * 1000)
        finally:
            trio.lowlevel.remove_instrument(counter)
        nursery.cancel_scope.cancel()
    assert journal.groups_written == GROUPS + 1
    assert journal.triggers["queue_empty"] == GROUPS + 1
    # The journal task took 3 steps a group (woken by the add, after its checkpoint, resumed
    # to release the group), 5 in all with the adder's and the thread's result delivery; then
    # 3: the adder's checkpoint (the queue-empty trigger's join) and its resumption, and the
    # delivery.  Now the join is the scheduler's pass end (no task step): the adder's
    # resumption and the delivery.
    assert counter.steps == 0, counter.steps / GROUPS
    assert counter.all_steps / GROUPS <= 2, counter.all_steps / GROUPS


async def test_groups_under_steady_load_chain_without_the_journal_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adds keep arriving while a group is written (a 3 ms fsync, an add every 1 ms): each
    write's completion starts the next group, the journal task sleeps through all of them."""
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(0.003)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    journal = Journal(tmp_path, first_file_id=1, flush_when_queue_empty=True)
    await journal.open()
    adds = 60
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.append(TYPE_ADD, 1, 0, -1, b"warm")
        counter = JournalTaskSteps()
        trio.lowlevel.add_instrument(counter)
        groups_before = journal.groups_written
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as adders:
                    for entry in range(1, adds + 1):
                        adders.start_soon(journal.append, TYPE_ADD, 1, entry, entry - 1, b"y")
                        await trio.sleep(0.001)
        finally:
            trio.lowlevel.remove_instrument(counter)
        nursery.cancel_scope.cancel()
    groups = journal.groups_written - groups_before
    assert groups >= 5
    # The old loop was resumed after every write and checkpointed before the next: 2 steps a
    # group under load.  Now completions chain the writes, and a write started from idle (if
    # this shared machine stalls the adder for a whole fsync) is started by the add.
    assert counter.steps == 0, (counter.steps, groups)


async def test_an_in_process_add_one_turn_later_joins_the_group(tmp_path: Path) -> None:
    """A group that append_soon opens on an idle journal is started only after one more
    scheduler turn, so an add made one turn after the first still joins it: synchronous senders
    on several connections arrive over a few turns, and without that turn 8 concurrent RocketMQ
    senders shared a group 5.2 at a time instead of 8 (more fsyncs, more CPU per send).  The
    journal task and the adder run in that turn in either order (Trio shuffles a turn), so 20
    rounds leave no chance for a journal that starts the group a turn early."""
    journal = Journal(tmp_path, first_file_id=1, flush_when_queue_empty=True)
    await journal.open()
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.append(TYPE_ADD, 1, 0, -1, b"warm")
        with trio.fail_after(10):
            for entry in range(1, 2 * GROUPS, 2):
                before = journal.groups_written
                done = trio.Event()
                outcomes: list[BaseException | None] = []

                def finished(error: BaseException | None, done: trio.Event = done,
                             outcomes: list[BaseException | None] = outcomes) -> None:
                    outcomes.append(error)
                    if len(outcomes) == 2:
                        done.set()

                journal.append_soon(TYPE_ADD, 1, entry, entry - 1, b"first", finished)
                await trio.lowlevel.checkpoint()  # the turn in which the journal task is woken
                journal.append_soon(TYPE_ADD, 1, entry + 1, entry, b"a turn later", finished)
                await done.wait()
                assert outcomes == [None, None]
                assert journal.groups_written - before == 1
        nursery.cancel_scope.cancel()
