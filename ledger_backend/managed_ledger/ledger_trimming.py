"""Trimming a managed ledger: whole ledgers leave the front of its list (retention, or
delete-records up to a position), their offloaded objects with them (one module per concern:
managed_ledger.py keeps the appends, the metadata writes, reads, cursors and close).

`trim` applies retention, `delete_ledgers_before` deletes the closed ledgers before one;
both CAS-remove the ledgers from the list first (`_unlist_front_ledgers`, under the metadata
lock) and only then delete them and their objects (`_delete_unlisted`, `_delete_objects`,
which ledger_swap.py uses too).

They are ManagedLedger's methods (bound in its class body: `self` is the managed ledger, typed
by the `TrimmedLedger` protocol), kept here for size.

This module must never delete the current ledger or a ledger still listed.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ledger_backend.managed_ledger.ledger_finishing import ManagedLedgerParts
from ledger_backend.managed_ledger.metadata_format import OffloadRecord
from ledger_backend.managed_ledger.retention import ledgers_past_retention
from ledger_backend.managed_ledger.types import Position
from ledger_backend.offload.object_reader import OffloadedReader
from ledger_backend.offload.offloader import Offloader, OffloadError, at_recorded

# managed_ledger.py's logger, as before these pieces moved here
log = logging.getLogger("ledger_backend.managed_ledger.managed_ledger")


class TrimmedLedger(ManagedLedgerParts, Protocol):
    """What these steps use of ManagedLedger besides ManagedLedgerParts (ledger_finishing.py)."""

    offloader: Offloader | None
    _offloaded_reader: OffloadedReader

    def position_key(self, position: Position) -> tuple[int, int]: ...
    async def _unlist_front_ledgers(self, doomed: list[int]) -> list[OffloadRecord]: ...
    async def _delete_unlisted(
        self, doomed: list[int], objects: list[OffloadRecord] | None = None
    ) -> None: ...
    async def _delete_objects(self, objects: list[OffloadRecord]) -> None: ...


async def trim(self: TrimmedLedger) -> list[int]:
    """Apply retention (config.retention_time_s / retention_bytes); returns deleted ids."""
    async with self._meta_lock:
        self._check_writable()
        doomed = ledgers_past_retention(
            self._records,
            current_ledger_id=self._current.record.ledger_id,
            now_ms=int(self._clock() * 1000),
            retention_time_s=self.config.retention_time_s,
            retention_bytes=self.config.retention_bytes,
        )
        objects = await self._unlist_front_ledgers(doomed)
    await self._delete_unlisted(doomed, objects)
    return doomed


async def delete_ledgers_before(self: TrimmedLedger, ledger_id: int) -> list[int]:
    """Delete every closed ledger before `ledger_id` in log order (never the current one)."""
    async with self._meta_lock:
        self._check_writable()
        limit = self.position_key(Position(ledger_id, 0))[0]
        doomed: list[int] = []
        for record in self._records:
            if (
                record.order_key >= limit
                or not record.closed
                or record is self._current.record
            ):
                break
            doomed.append(record.ledger_id)
        objects = await self._unlist_front_ledgers(doomed)
    await self._delete_unlisted(doomed, objects)
    return doomed


async def _unlist_front_ledgers(self: TrimmedLedger, doomed: list[int]) -> list[OffloadRecord]:
    # Caller holds _meta_lock. The list loses them first (CAS); only then are they deleted.
    # Returns the offloaded objects of the unlisted ledgers (to delete with them).
    if not doomed:
        return []
    gone = set(doomed)
    if self._current.record.ledger_id in gone:
        raise AssertionError("refusing to delete the current ledger")
    remaining = [r for r in self._records if r.ledger_id not in gone]
    objects = [r.offload for r in self._records if r.ledger_id in gone and r.offload]
    await self._write_metadata(remaining)
    self._records = remaining
    self._cache.drop_ledgers(gone)
    return objects


async def _delete_unlisted(
    self: TrimmedLedger, doomed: list[int], objects: list[OffloadRecord] | None = None
) -> None:
    for ledger_id in doomed:
        await self._readers.forget(ledger_id)
        await self._delete_ledger_quietly(ledger_id)
    await self._delete_objects(objects or [])
    if doomed:
        log.info("managed ledger %r trimmed ledgers %s", self.name, doomed)


async def _delete_objects(self: TrimmedLedger, objects: list[OffloadRecord]) -> None:
    """Delete the offloaded objects of ledgers no longer listed (best effort)."""
    for obj in objects:
        self._offloaded_reader.drop(obj.key)
        if self.offloader is None or self.offloader.driver != obj.driver:
            log.warning("%r: object %r (%s) left behind: driver not configured",
                        self.name, obj.key, obj.driver)
            continue
        try:  # where it was recorded, even if [offload] names another place now
            await at_recorded(self.offloader, obj.location).delete(obj.key)
        except OffloadError as exc:
            log.warning("%r: could not delete object %r: %s", self.name, obj.key, exc)
