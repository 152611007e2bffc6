"""A managed ledger's appends: append (a task waits for the entry to be durable) and
append_soon (a callback hears it, no task: RocketMQ's send answered from its completion), the
queue that appends wait in while a rollover is due, and the steps both paths share
(_submitting, _add_failed, _added).

They are ManagedLedger's methods, bound in its class body (`self` is the managed ledger, typed
by the `AppendingLedger` protocol), as ledger_finishing.py's and ledger_trimming.py's are: the
append path is hot, and a bound module function costs a call exactly what a method defined in
the class costs. The module docstring of managed_ledger.py states the rules they keep
(positions taken in call order before the first await, one writer, rollover before an append).

This module must never take an entry id after an await, nor answer an append before its add
was acknowledged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from ledger_backend.client.errors import LedgerClosedError, LedgerError, LedgerFencedError
from ledger_backend.managed_ledger.ledger_finishing import ManagedLedgerParts, WriteLedger
from ledger_backend.managed_ledger.types import ManagedLedgerFencedError, Position


class AppendingLedger(ManagedLedgerParts, Protocol):
    """What the appends use of ManagedLedger besides (its other append steps among them)."""

    _waiters: deque[trio.Event]
    _fenced_reason: str | None
    _closed: bool

    def _become_fenced(self, reason: str) -> None: ...
    def _notify_entries(self) -> None: ...
    async def _roll_over(self) -> None: ...
    async def _finish_ledger(self, ledger: WriteLedger) -> None: ...
    async def _finish_retired(self, ledger: WriteLedger) -> None: ...
    def _needs_rollover(self, ledger: WriteLedger) -> bool: ...
    async def _append_queued(self, data: bytes) -> Position: ...
    async def _submit(self, ledger: WriteLedger, data: bytes) -> Position: ...
    def _submitting(self, ledger: WriteLedger, data: bytes) -> int: ...
    def _add_failed(self, ledger: WriteLedger, exc: LedgerError) -> BaseException: ...
    def _added(self, ledger: WriteLedger, carried_lac: int, entry_id: int, data: bytes
               ) -> Position: ...  # fmt: skip


async def append(self: AppendingLedger, data: bytes) -> Position:
    """Append one entry; see the module docstring for ordering and durability."""
    data = bytes(data)
    self._check_writable()
    current = self._current
    if not self._waiters and not self._needs_rollover(current):
        return await self._submit(current, data)  # no checkpoint before the id is taken
    return await self._append_queued(data)


def _needs_rollover(self: AppendingLedger, ledger: WriteLedger) -> bool:
    config = self.config
    age_s = self._clock() - ledger.record.created_ms / 1000
    return (
        ledger.failed
        or ledger.submitted_entries >= config.max_entries_per_ledger
        or ledger.submitted_bytes >= config.max_ledger_bytes
        or (age_s >= config.max_ledger_age_s and ledger.submitted_entries > 0)
    )


async def _append_queued(self: AppendingLedger, data: bytes) -> Position:
    my_turn = trio.Event()
    self._waiters.append(my_turn)
    if len(self._waiters) == 1:
        my_turn.set()
    try:
        await my_turn.wait()
        while True:
            self._check_writable()
            current = self._current
            if not self._needs_rollover(current):
                break
            with trio.CancelScope(shield=True):  # bounded by the client/store timeouts
                await self._roll_over()
    except BaseException:
        was_head = bool(self._waiters) and self._waiters[0] is my_turn
        self._waiters.remove(my_turn)
        if was_head and self._waiters:
            self._waiters[0].set()
        raise
    # Our turn, on a writable ledger: leave the queue and take the id before any checkpoint,
    # so the next in line (woken now, running later) gets the next id.
    assert self._waiters[0] is my_turn
    self._waiters.popleft()
    if self._waiters:
        self._waiters[0].set()
    return await self._submit(current, data)


async def _submit(self: AppendingLedger, ledger: WriteLedger, data: bytes) -> Position:
    carried_lac = self._submitting(ledger, data)
    try:
        try:
            entry_id = await ledger.handle.append(data)
        except LedgerError as exc:
            failure = self._add_failed(ledger, exc)
            if failure is exc:
                raise
            raise failure from exc
        previous = ledger.previous
        if previous is not None:
            # Earlier appends went to the previous ledger: ours is not confirmed before them.
            with trio.CancelScope(shield=True):
                await previous.drained.wait()
            ledger.previous = None
        position = self._added(ledger, carried_lac, entry_id, data)
    finally:
        ledger.in_flight -= 1
        if ledger.retired and ledger.in_flight == 0:
            with trio.CancelScope(shield=True):
                await self._finish_ledger(ledger)
    self._notify_entries()
    return position


def takes_append_soon(self: AppendingLedger) -> bool:
    """Whether append_soon may start an append now: nothing queues ahead of it (no append
    waiting for its turn or a rollover, none due, no previous ledger still draining) and
    the current ledger's handle takes adds without a waiting task."""
    current = self._current
    return (not self._waiters and current.previous is None and not self._closed
            and self._fenced_reason is None and not self._needs_rollover(current)
            and hasattr(current.handle, "append_soon"))


def append_soon(self: AppendingLedger, data: bytes,
                on_done: Callable[[Position | BaseException], None]) -> None:
    """append() without a waiting task, right after takes_append_soon() said it may (no
    checkpoint between): `on_done` gets the position once the entry is durable, or the
    exception append() would raise, in the Trio thread (possibly before this returns)."""
    ledger = self._current
    carried_lac = self._submitting(ledger, data)
    answered = False  # on_done is called once, whatever the handle does

    def added(entry_id: int, error: LedgerError | None) -> None:
        nonlocal answered
        if answered:
            return
        answered = True
        ledger.in_flight -= 1
        result: Position | BaseException
        try:
            if error is not None:
                result = self._add_failed(ledger, error)
            else:
                result = self._added(ledger, carried_lac, entry_id, data)
                self._notify_entries()
        except Exception as exc:  # a bug: the caller still hears how its append ended
            result = exc
        if ledger.retired and ledger.in_flight == 0:
            trio.lowlevel.spawn_system_task(self._finish_retired, ledger)
        on_done(result)

    try:
        ledger.handle.append_soon(data, added)  # type: ignore[attr-defined]
    except Exception as exc:  # not taken (not writable, or a fault while sending)
        if not answered:
            answered = True
            ledger.in_flight -= 1
            on_done(self._add_failed(ledger, exc) if isinstance(exc, LedgerError) else exc)


def _submitting(self: AppendingLedger, ledger: WriteLedger, data: bytes) -> int:
    """Count an add to `ledger` as submitted and in flight; the LAC it piggybacks."""
    ledger.submitted_entries += 1
    ledger.submitted_bytes += len(data)
    ledger.in_flight += 1
    return ledger.handle.last_add_confirmed


def _add_failed(self: AppendingLedger, ledger: WriteLedger, exc: LedgerError) -> BaseException:
    """What append() raises for an add its ledger refused or failed, the state updated."""
    if isinstance(exc, (LedgerFencedError, LedgerClosedError)):
        ledger_id = ledger.record.ledger_id
        self._become_fenced(f"ledger {ledger_id} refused an add: {exc!r}")
        fenced = ManagedLedgerFencedError(
            f"managed ledger {self.name!r}: ledger {ledger_id} was fenced by a new owner")
        fenced.__cause__ = exc
        return fenced
    ledger.failed = True  # the next append rolls over; finishing recovers its end
    return exc


def _added(self: AppendingLedger, ledger: WriteLedger, carried_lac: int, entry_id: int, data: bytes
           ) -> Position:  # fmt: skip
    record = ledger.record
    record.entries = max(record.entries, entry_id + 1)
    record.size += len(data)
    ledger.durable_lac = max(ledger.durable_lac, carried_lac)
    position = Position(record.ledger_id, entry_id)
    self._cache.put(position, data)
    return position
