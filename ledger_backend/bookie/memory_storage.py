"""MemoryBookieStorage: the in-memory twin of BookieStorage, for tests of the server and above.

It keeps the contract's semantics exactly (fencing, recovery adds, LAC as the max `lac` seen
on adds, long-poll waits for LAC updates, the read-only flag, deleted ledgers refusing adds)
but nothing is durable: it must never be used where an acknowledgement has to survive a crash.

Test hooks beyond the contract: ``set_read_only``, ``hold_adds`` / ``release_adds`` (adds
wait, as if for a journal fsync, until released — to observe pipelining), ``add_latency_s``,
``adds_in_flight`` and ``set_disk_usage``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import trio

from ledger_backend.bookie.storage_api import (
    BookieReadOnlyError,
    BookieStorage,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)


@dataclass
class _MemoryLedger:
    entries: dict[int, bytes] = field(default_factory=dict)
    lac: int = -1
    last_entry_id: int = -1
    fenced: bool = False


class MemoryBookieStorage(BookieStorage):
    """Bookie storage in a dict. Not durable; same observable behaviour as the real engine."""

    def __init__(
        self, *, total_bytes: int = 1 << 40, add_latency_s: float = 0.0, read_only: bool = False
    ) -> None:
        self._ledgers: dict[int, _MemoryLedger] = {}
        self._deleted: set[int] = set()
        # set (and dropped) whenever a ledger's LAC moves: wakes its long polls
        self._lac_changed: dict[int, trio.Event] = {}
        self._read_only = read_only
        self._total_bytes = total_bytes
        self._used_bytes: int | None = None  # None: the sum of stored entry sizes
        self._stored_bytes = 0
        self.add_latency_s = add_latency_s
        self._adds_released = trio.Event()
        self._adds_released.set()
        self.adds_in_flight = 0
        self.max_adds_in_flight = 0

    # --- test hooks ---------------------------------------------------------------------

    def set_read_only(self, read_only: bool) -> None:
        self._read_only = read_only

    def set_disk_usage(self, used_bytes: int | None, total_bytes: int | None = None) -> None:
        self._used_bytes = used_bytes
        if total_bytes is not None:
            self._total_bytes = total_bytes

    def hold_adds(self) -> None:
        """From now on adds are stored but wait (unacknowledged) until release_adds()."""
        if self._adds_released.is_set():
            self._adds_released = trio.Event()

    def release_adds(self) -> None:
        self._adds_released.set()

    # --- BookieStorage ------------------------------------------------------------------

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, data: bytes, *, recovery_add: bool = False
    ) -> None:
        await trio.lowlevel.checkpoint()
        if self._read_only:
            raise BookieReadOnlyError(f"bookie is read-only; add {ledger_id}:{entry_id} refused")
        if ledger_id in self._deleted:
            raise LedgerFencedError(f"ledger {ledger_id} was deleted on this bookie")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = _MemoryLedger()
        if ledger.fenced and not recovery_add:
            raise LedgerFencedError(f"ledger {ledger_id} is fenced")
        previous = ledger.entries.get(entry_id)
        ledger.entries[entry_id] = bytes(data)
        self._stored_bytes += len(data) - (len(previous) if previous is not None else 0)
        ledger.last_entry_id = max(ledger.last_entry_id, entry_id)
        # the "journal fsync": the entry is stored but not yet acknowledged
        self.adds_in_flight += 1
        self.max_adds_in_flight = max(self.max_adds_in_flight, self.adds_in_flight)
        try:
            if self.add_latency_s > 0:
                await trio.sleep(self.add_latency_s)
            await self._adds_released.wait()
        finally:
            self.adds_in_flight -= 1
        if lac > ledger.lac:
            ledger.lac = lac
            self._notify(ledger_id)

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        await trio.lowlevel.checkpoint()
        ledger = self._ledger(ledger_id)
        try:
            return ledger.entries[entry_id]
        except KeyError:
            raise NoSuchEntryError(f"entry {ledger_id}:{entry_id} is not stored here") from None

    async def fence(self, ledger_id: int) -> int:
        await trio.lowlevel.checkpoint()
        if self._read_only:
            raise BookieReadOnlyError(f"bookie is read-only; cannot fence ledger {ledger_id}")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            # fencing a ledger this bookie never saw must still stop its old writer here
            ledger = self._ledgers[ledger_id] = _MemoryLedger()
            self._deleted.discard(ledger_id)
        ledger.fenced = True
        return ledger.lac

    def is_fenced(self, ledger_id: int) -> bool:
        ledger = self._ledgers.get(ledger_id)
        return ledger is not None and ledger.fenced

    def last_add_confirmed(self, ledger_id: int) -> int:
        return self._ledger(ledger_id).lac

    def set_explicit_lac(self, ledger_id: int, lac: int) -> None:
        ledger = self._ledger(ledger_id)
        if ledger.fenced:
            raise LedgerFencedError(f"ledger {ledger_id} is fenced")
        if lac > ledger.lac:
            ledger.lac = lac
            self._notify(ledger_id)

    def last_entry_id(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.last_entry_id

    async def wait_for_lac_update(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        """A ledger this bookie has not seen yet counts as LAC -1 (its first add may come)."""
        deadline = trio.current_time() + timeout_s if math.isfinite(timeout_s) else math.inf
        while True:
            lac = self._current_lac(ledger_id)
            if lac > previous_lac:
                return lac
            event = self._lac_changed.get(ledger_id)
            if event is None:
                event = self._lac_changed[ledger_id] = trio.Event()
            with trio.move_on_at(deadline):
                await event.wait()
                continue
            return self._current_lac(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        await trio.lowlevel.checkpoint()
        ledger = self._ledgers.pop(ledger_id, None)
        self._deleted.add(ledger_id)
        if ledger is not None:
            self._stored_bytes -= sum(len(e) for e in ledger.entries.values())
            self._notify(ledger_id)

    async def checkpoint(self) -> None:
        await trio.lowlevel.checkpoint()

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def is_read_only(self) -> bool:
        return self._read_only

    def disk_usage(self) -> tuple[int, int]:
        used = self._stored_bytes if self._used_bytes is None else self._used_bytes
        return used, self._total_bytes

    # --- internals ----------------------------------------------------------------------

    def _ledger(self, ledger_id: int) -> _MemoryLedger:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} is not stored here")
        return ledger

    def _current_lac(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.lac

    def _notify(self, ledger_id: int) -> None:
        event = self._lac_changed.pop(ledger_id, None)
        if event is not None:
            event.set()
