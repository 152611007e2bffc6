"""The ledgers a managed ledger writes, and their ends: rollover to a new ledger and the
finishing of a retired one (one module per concern: managed_ledger.py keeps the appends, the
metadata writes, reads, cursors and close).

`WriteLedger` is a ledger this instance writes (the current one, or a retired one still
draining).  `_roll_over` creates the next ledger, CAS-appends it to the list and switches;
`_finish_ledger` closes a retired ledger once its appends are done (recovering it instead when
an add failed) and records its final size; `_close_and_record` does the close and the record in
one metadata transaction while the managed ledger closes; `_finish_retired` is the system task
that finishes a retired ledger whose last add in flight was an append_soon.

They are ManagedLedger's methods (bound in its class body: `self` is the managed ledger, typed
by the `FinishingLedger` protocol, `ManagedLedgerParts` what it shares with
ledger_trimming.py's), kept here for size.  The module docstring of
managed_ledger.py states the rules they keep.

This module must never close a ledger with appends in flight or touch one after fencing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import trio

# the module, not log_failure: faults imports managed_ledger.types, whose package imports this
# module (tests/architecture/test_import_order.py)
from ledger_backend import faults
from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.client.errors import LedgerClosedError, LedgerError, LedgerFencedError
from ledger_backend.managed_ledger.client_protocol import BookKeeperLike, WriteHandleLike
from ledger_backend.managed_ledger.entry_reader import LedgerReaders
from ledger_backend.managed_ledger.metadata_format import LedgerRecord
from ledger_backend.managed_ledger.tail_cache import TailCache
from ledger_backend.managed_ledger.types import (
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerFencedError,
)
from ledger_backend.metadata.store import MetadataError, MetadataStore, SetOp, Stat

# managed_ledger.py's logger, as before these pieces moved here
log = logging.getLogger("ledger_backend.managed_ledger.managed_ledger")


@dataclass(eq=False)
class WriteLedger:
    """A ledger this instance writes (the current one, or a retired one still draining)."""

    handle: WriteHandleLike
    record: LedgerRecord
    previous: WriteLedger | None
    submitted_entries: int = 0
    submitted_bytes: int = 0
    in_flight: int = 0
    retired: bool = False
    failed: bool = False  # an add failed without fencing: recover it instead of closing it
    finishing: bool = False
    durable_lac: int = -1  # a LAC that an acknowledged add carried to the bookies
    drained: trio.Event = field(default_factory=trio.Event)


class ManagedLedgerParts(Protocol):
    """What the friend modules of ManagedLedger here use of it (a Protocol: they do not
    import it): its records, the ledger it writes, and the metadata write."""

    name: str
    config: ManagedLedgerConfig
    _records: list[LedgerRecord]
    _current: WriteLedger
    _meta_lock: trio.Lock
    _clock: Callable[[], float]
    _readers: LedgerReaders
    _cache: TailCache

    def _check_writable(self) -> None: ...
    async def _write_metadata(
        self,
        records: list[LedgerRecord],
        *,
        pending: list[int] | None = None,
        garbage: list[int] | None = None,
        offload_pending: list[str] | None = None,
        offload_places: dict[str, dict[str, str]] | None = None,
    ) -> None: ...
    async def _delete_ledger_quietly(self, ledger_id: int) -> None: ...


class FinishingLedger(ManagedLedgerParts, Protocol):
    """What these steps use of ManagedLedger besides."""

    _bk: BookKeeperLike
    _store: MetadataStore
    _path: str
    _version: int
    _pending: list[int]
    _garbage: list[int]
    _offload_pending: list[str]
    _unfinished: set[WriteLedger]
    _fenced_reason: str | None
    _closed: bool

    def _become_fenced(self, reason: str) -> None: ...
    def _notify_entries(self) -> None: ...
    def _node_bytes(self, records: list[LedgerRecord], pending: list[int],
                    garbage: list[int], uploads: list[str],
                    places: dict[str, dict[str, str]] | None = None) -> bytes: ...
    async def _finish_ledger(self, ledger: WriteLedger) -> None: ...
    async def _close_and_record(self, ledger: WriteLedger) -> bool: ...


async def _finish_retired(self: FinishingLedger, ledger: WriteLedger) -> None:
    """A system task: finish a retired ledger whose last add in flight was an
    append_soon (an append() finishes it itself)."""
    try:
        with trio.CancelScope(shield=True):  # bounded by the client/store timeouts
            await self._finish_ledger(ledger)
    except Exception:  # a system task's exception would end the whole run
        # an expected fault (a bookie gone, the ledger fenced) is one WARNING line
        faults.log_failure(log, "finishing ledger %d of %r failed", ledger.record.ledger_id,
                    self.name, bug_level=logging.ERROR)


async def _roll_over(self: FinishingLedger) -> None:
    old = self._current
    handle = await self._bk.create_ledger(
        self.config.ensemble_size,
        self.config.write_quorum,
        self.config.ack_quorum,
        {"managed-ledger": self.name.encode("utf-8")},
    )
    record = LedgerRecord(handle.ledger_id, 0, 0, int(self._clock() * 1000), closed=False)
    try:
        async with self._meta_lock:
            self._check_writable()
            await self._write_metadata([*self._records, record])
            self._records.append(record)
    except (ManagedLedgerFencedError, ManagedLedgerClosedError):
        await self._delete_ledger_quietly(handle.ledger_id)  # surely not in the list
        raise
    new = WriteLedger(handle, record, previous=old)
    self._current = new
    self._unfinished.add(new)
    old.retired = True
    log.info(
        "managed ledger %r rolled over: ledger %d -> %d",
        self.name,
        old.record.ledger_id,
        record.ledger_id,
    )
    if old.in_flight == 0:
        await self._finish_ledger(old)


async def _finish_ledger(self: FinishingLedger, ledger: WriteLedger) -> None:
    """Close a retired ledger whose appends are done and record its final size."""
    if ledger.finishing:
        return
    ledger.finishing = True
    record = ledger.record
    try:
        if self._fenced_reason is not None:
            return  # the new owner recovers it; we must not touch it
        if ledger.failed:
            handle = await self._bk.open_ledger(record.ledger_id, recovery=True)
            recovered = handle.metadata.last_entry_id + 1
            if recovered < record.entries:
                log.error(
                    "ledger %d recovered to %d entries, fewer than the %d acknowledged",
                    record.ledger_id,
                    recovered,
                    record.entries,
                )
            record.entries = recovered
            record.size = handle.metadata.length
            await self._readers.forget(record.ledger_id)
            self._readers.adopt(handle)
            recorded = False
        else:
            recorded = await self._close_and_record(ledger)
            await self._readers.forget(record.ledger_id)
        record.closed = True
        if not recorded:
            async with self._meta_lock:
                if self._fenced_reason is None:
                    await self._write_metadata(list(self._records))
    except (LedgerFencedError, LedgerClosedError) as exc:
        self._become_fenced(f"closing ledger {record.ledger_id} failed: {exc!r}")
    except ManagedLedgerFencedError:
        pass  # already recorded by _write_metadata
    except (LedgerError, MetadataError) as exc:
        # The list keeps closed=False (or is updated by a later CAS); a new owner recovers it.
        log.warning("finishing ledger %d of %r failed: %r", record.ledger_id, self.name, exc)
    finally:
        self._unfinished.discard(ledger)
        ledger.drained.set()
        self._cache.evict()
        self._notify_entries()


async def _close_and_record(self: FinishingLedger, ledger: WriteLedger) -> bool:
    """Close a retired ledger's handle; while this managed ledger closes (an idle unload,
    a bundle release), record it CLOSED in the same metadata transaction as the ledger's
    own CLOSED state (handle.close_together): one write instead of two.  True when that
    recorded it (record.closed set); False when the caller must record it (the handle
    closed alone: any other time, a handle without close_together, another client's
    store, or a refused transaction, whose _write_metadata then meets the same refusal)."""
    together = getattr(ledger.handle, "close_together", None)
    if together is None or not self._closed:
        await ledger.handle.close()
        return False
    async with self._meta_lock:
        if self._fenced_reason is not None:
            await ledger.handle.close()
            return False
        records = [replace(r, closed=True) if r is ledger.record else r
                   for r in self._records]
        node = self._node_bytes(records, self._pending, self._garbage,
                                self._offload_pending)
        crash_point("managed_ledger.close.before_record")
        results = await together(self._store, [SetOp(self._path, node, self._version)])
        if results is None:
            return False
        crash_point("managed_ledger.close.after_record")
        stat = results[0]
        assert isinstance(stat, Stat)
        self._version = stat.version
        ledger.record.closed = True
        return True
