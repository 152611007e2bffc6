"""The timers of a ledger client's write handles, in two tasks for all of them.

A write handle has two timed duties (write_handle.py): fail itself once its oldest
unacknowledged add passes its deadline, and send its LAC to the bookies once adds paused for
`explicit_lac_delay_s`. Each handle used to start a task per duty (a sleeping watchdog while
adds were in flight, a sleeping sender after every pause): two task starts per new ledger,
~10% of a partition's first open, and thousands of sleeping tasks when thousands of
partitions are written at once. Here one task per duty serves every handle of the client.

Both work because every handle of a client adds the same constant to "now": an add's deadline
is its start + 4 x timeout_s, a LAC is due at the pause + explicit_lac_delay_s. So what is
registered later is never due earlier, and each task sleeps until the first thing due:
- deadlines: the handles with adds in flight, in a dict (a handle leaves it as soon as its
  adds drain, it closes or it fails: nothing here keeps an idle or closed handle alive);
- LACs: a FIFO of (due, handle), each handle at most once (it keeps a handle at most
  `explicit_lac_delay_s` after its pause).
A task ends when nothing is left for it and the next registration starts it again. This module
must never fail a handle before its deadline nor send a LAC the handle did not confirm (the
handles decide both: `deadline_passed`, `send_explicit_lac`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import trio


class TimedHandle(Protocol):
    def oldest_deadline(self) -> float | None: ...  # None: no add in flight any more

    def deadline_passed(self) -> None: ...  # fails the handle (its oldest add timed out)

    def send_explicit_lac(self) -> None: ...  # the pause lasted: tell the bookies the LAC


class HandleTimers:
    """The deadline watchdog and the explicit-LAC sender of one client's write handles."""

    def __init__(self, nursery: trio.Nursery, explicit_lac_delay_s: float) -> None:
        self._nursery = nursery
        self._lac_delay_s = explicit_lac_delay_s
        self._in_flight: dict[TimedHandle, None] = {}
        self._watching = False
        self._lac_due: deque[tuple[float, TimedHandle]] = deque()
        self._sending = False

    # ----------------------------------------------------------------- deadlines

    def watch(self, handle: TimedHandle) -> None:
        """`handle` has adds in flight (call when its first one starts)."""
        self._in_flight[handle] = None
        if not self._watching:
            self._watching = True
            self._nursery.start_soon(self._watch_deadlines)

    def unwatch(self, handle: TimedHandle) -> None:
        """`handle` has no add in flight any more (drained, closed or failed)."""
        self._in_flight.pop(handle, None)

    async def _watch_deadlines(self) -> None:
        try:
            # (no event to wait on: the next thing due is a time)
            while (deadline := self._next_deadline()) < math.inf:  # noqa: ASYNC110
                await trio.sleep_until(deadline)
        finally:
            self._watching = False

    def _next_deadline(self) -> float:
        """Fail the handles past their deadline; the earliest deadline left (no handle is
        referenced from the sleeping task's frame)."""
        now = trio.current_time()
        earliest = math.inf
        for handle in list(self._in_flight):
            deadline = handle.oldest_deadline()
            if deadline is None:
                self._in_flight.pop(handle, None)
            elif deadline <= now:
                self._in_flight.pop(handle, None)
                handle.deadline_passed()
            else:
                earliest = min(earliest, deadline)
        return earliest

    # ----------------------------------------------------------------- explicit LAC

    def lac_after_pause(self, handle: TimedHandle) -> None:
        """`handle`'s adds drained: call its send_explicit_lac once the pause has lasted
        `explicit_lac_delay_s` (the handle checks then whether it still should)."""
        self._lac_due.append((trio.current_time() + self._lac_delay_s, handle))
        if not self._sending:
            self._sending = True
            self._nursery.start_soon(self._send_lacs)

    async def _send_lacs(self) -> None:
        try:
            while self._lac_due:
                due = self._lac_due[0][0]
                if due > trio.current_time():
                    await trio.sleep_until(due)
                    continue
                self._lac_due.popleft()[1].send_explicit_lac()
        finally:
            self._sending = False
