"""Reading entries of one managed ledger's ledgers from the bookies, through cached read handles.

Closed ledgers are read through handles from open_ledger(recovery=False) (or the handle that
recovery produced), kept until the ledger is trimmed or the managed ledger closes. The open
(current) ledger is read the same way, refreshing the handle's LAC when asked for an entry
beyond it. A handle opened while its ledger was still open is dropped when the ledger closes
(`forget`), because such a handle may never learn the final LAC. This module never opens a
ledger with recovery: fencing belongs to the owner's open path only.
"""

from __future__ import annotations

import logging

import trio

from ledger_backend.client.errors import LedgerClosedError, NoSuchEntryError
from ledger_backend.managed_ledger.client_protocol import BookKeeperLike, ReadHandleLike

log = logging.getLogger(__name__)


class LedgerReaders:
    def __init__(self, bk: BookKeeperLike) -> None:
        self._bk = bk
        self._handles: dict[int, ReadHandleLike] = {}
        self._open_lock = trio.Lock()

    def adopt(self, handle: ReadHandleLike) -> None:
        """Keep a handle obtained elsewhere (e.g. from recovery) for later reads."""
        old = self._handles.get(handle.ledger_id)
        self._handles[handle.ledger_id] = handle
        if old is not None and old is not handle:
            log.debug("replaced read handle of ledger %d", handle.ledger_id)

    async def read(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        try:
            entries = await self._read_once(ledger_id, first, last)
        except (NoSuchEntryError, LedgerClosedError):
            # The cached handle may predate the ledger's close and never learn its final LAC:
            # one retry on a fresh handle, which sees the closed metadata.
            await self.forget(ledger_id)
            entries = await self._read_once(ledger_id, first, last)
        if len(entries) != last - first + 1:
            raise RuntimeError(
                f"ledger {ledger_id}: asked for entries {first}..{last}, got {len(entries)}"
            )
        return [bytes(e) for e in entries]

    async def _read_once(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        handle = await self._handle(ledger_id)
        if handle.last_add_confirmed < last:
            await handle.read_lac()
        return list(await handle.read(first, last))

    async def forget(self, ledger_id: int) -> None:
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            await _close_quietly(handle)

    async def close_all(self) -> None:
        handles, self._handles = list(self._handles.values()), {}
        for handle in handles:
            await _close_quietly(handle)

    async def _handle(self, ledger_id: int) -> ReadHandleLike:
        handle = self._handles.get(ledger_id)
        if handle is not None:
            return handle
        async with self._open_lock:
            handle = self._handles.get(ledger_id)
            if handle is None:
                handle = await self._bk.open_ledger(ledger_id, recovery=False)
                self._handles[ledger_id] = handle
        return handle


async def _close_quietly(handle: ReadHandleLike) -> None:
    try:
        await handle.close()
    except Exception as exc:  # a read handle holds nothing durable; closing is best effort
        log.debug("closing read handle of ledger %d failed: %r", handle.ledger_id, exc)
