"""Tasks that park between jobs: a task that finished one job waits here for the next instead
of exiting, so whoever has work hands it over (one trio reschedule) rather than spawning a task
per job.  Used by the in-process bookie connection's workers and the RocketMQ listener's
request tasks.

This module must never run a job itself: it only hands jobs to waiting tasks.
"""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class ParkedTasks(Generic[T]):
    """The tasks parked in `park`, newest last."""

    def __init__(self) -> None:
        self._tasks: list[trio.lowlevel.Task] = []

    def __len__(self) -> int:
        return len(self._tasks)

    def hand(self, job: T) -> bool:
        """Give `job` to the newest parked task; False when none is parked."""
        if not self._tasks:
            return False
        trio.lowlevel.reschedule(self._tasks.pop(), outcome.Value(job))
        return True

    def hand_all(self, job: T) -> None:
        """Give `job` (an end marker, say) to every parked task."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            trio.lowlevel.reschedule(task, outcome.Value(job))

    async def park(self) -> T:
        """Wait until `hand` or `hand_all` gives this task a job; cancellation ends the wait."""
        task = trio.lowlevel.current_task()
        self._tasks.append(task)

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            with contextlib.suppress(ValueError):
                self._tasks.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        job: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return job
