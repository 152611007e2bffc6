"""What a journal group write costs the Trio thread, in task steps (exact, unlike timings on a
shared machine): with one add per group (a lone sender) it is paid by every add."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.lowlevel

from ledger_backend.bookie.journal import TYPE_ADD, Journal

GROUPS = 20


class JournalTaskSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Journal.run"):
            self.steps += 1


async def test_a_group_write_costs_three_journal_task_steps(tmp_path: Path) -> None:
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
    # woken by the add; after the queue-empty checkpoint, hand the group to a worker thread;
    # resumed with its result.  trio.to_thread.run_sync adds a fourth (its limiter checkpoint).
    assert counter.steps / GROUPS <= 3, counter.steps / GROUPS
