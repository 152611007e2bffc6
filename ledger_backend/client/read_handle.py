"""ReadHandle: reads entries of a ledger from its bookies, digests verified on every read.

A closed ledger is readable up to its last entry; an open one up to the LAC learned from the
bookies of its last fragment (the highest LAC they saw piggybacked on adds). Each entry is read
from a bookie of its write set, trying the next one on an error, a timeout or a digest
mismatch. This module must never return bytes that failed their CRC-32C check, and never read
past the LAC (use recovery for that).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import trio

from ledger_backend.bookie.protocol import ReadEntryRequest, ReadEntryResponse, Status
from ledger_backend.client.bookie_client import check_status
from ledger_backend.client.client_context import ClientContext
from ledger_backend.client.entry_format import DecodedEntry, decode_entry
from ledger_backend.client.errors import (
    BKTimeoutError,
    DigestMismatchError,
    LedgerError,
    NoSuchEntryError,
)
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState

log = logging.getLogger(__name__)

_MAX_PARALLEL_READS = 64
_LAC_POLL_INTERVAL_S = 0.05
_LONG_POLL_ROUND_S = 1.0


async def read_entry_from_bookies(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, entry_id: int,
    *, fence: bool = False,
) -> DecodedEntry:  # fmt: skip
    """Read and verify one entry, trying each bookie of its write set in turn."""
    errors: list[LedgerError] = []
    for bookie in metadata.write_set_bookies(entry_id):
        try:
            response = await ctx.pool.connection(bookie).request(
                lambda rid: ReadEntryRequest(rid, ledger_id, entry_id, fence)
            )
            check_status(response, bookie)
            assert isinstance(response, ReadEntryResponse)
            return decode_entry(response.body, ledger_id=ledger_id, entry_id=entry_id)
        except LedgerError as exc:
            if isinstance(exc, DigestMismatchError):
                log.error("ledger %d entry %d from %s: %s", ledger_id, entry_id, bookie, exc)
            errors.append(exc)
    for kind in (DigestMismatchError, BKTimeoutError):
        for error in errors:
            if isinstance(error, kind):
                raise error
    if errors and all(isinstance(e, NoSuchEntryError) for e in errors):
        raise errors[0]
    raise errors[-1] if errors else NoSuchEntryError(f"ledger {ledger_id}: no bookies to read")


async def read_lac_from_bookies(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata
                                ) -> int:  # fmt: skip
    """Max LAC over the last fragment's bookies (at least the entry before that fragment,
    which was acknowledged before the fragment began)."""
    first_entry, ensemble = metadata.ensembles[-1]
    lacs: list[int] = []
    errors: list[LedgerError] = []

    async def ask(bookie: str) -> None:
        try:
            lacs.append(await ctx.pool.read_lac(bookie, ledger_id))
        except LedgerError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for bookie in ensemble:
            nursery.start_soon(ask, bookie)
    if not lacs:
        raise errors[0] if errors else BKTimeoutError("no bookie answered a LAC read")
    return max(max(lacs), first_entry - 1)


class ReadHandle:
    """Reader of one ledger. Open through BookKeeper.open_ledger."""

    def __init__(self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                 version: int, last_add_confirmed: int) -> None:  # fmt: skip
        self._ctx = ctx
        self.ledger_id = ledger_id
        self._metadata = metadata
        self._version = version
        self._lac = metadata.last_entry_id if metadata.is_closed else last_add_confirmed
        self._closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    @property
    def custom_metadata(self) -> Mapping[str, bytes]:
        return self._metadata.custom_metadata

    @property
    def is_closed(self) -> bool:
        return self._metadata.state is LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._metadata.length

    async def read(self, first: int, last: int) -> list[bytes]:
        """Entries first..last inclusive (payloads). NoSuchEntryError past the LAC."""
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        if last > self._lac:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is beyond the LAC {self._lac}"
            )
        results: list[bytes] = [b""] * (last - first + 1)
        if first == last:
            entry = await read_entry_from_bookies(self._ctx, self.ledger_id, self._metadata, first)
            results[0] = entry.payload
            return results
        limiter = trio.Semaphore(_MAX_PARALLEL_READS)
        errors: list[LedgerError] = []

        async with trio.open_nursery() as nursery:

            async def read_one(entry_id: int) -> None:
                try:
                    async with limiter:
                        entry = await read_entry_from_bookies(
                            self._ctx, self.ledger_id, self._metadata, entry_id
                        )
                except LedgerError as exc:  # raised plainly below, not in an ExceptionGroup
                    errors.append(exc)
                    nursery.cancel_scope.cancel()
                    return
                results[entry_id - first] = entry.payload

            for entry_id in range(first, last + 1):
                nursery.start_soon(read_one, entry_id)
        if errors:
            raise errors[0]
        return results

    async def read_lac(self) -> int:
        """Refresh the LAC: from the metadata if the ledger got closed, else from the bookies."""
        if self.is_closed:
            await trio.lowlevel.checkpoint()
            return self._lac
        metadata, version = await self._ctx.read_metadata(self.ledger_id)
        self._metadata, self._version = metadata, version
        if metadata.is_closed:
            self._lac = metadata.last_entry_id
            return self._lac
        self._lac = max(self._lac, await read_lac_from_bookies(self._ctx, self.ledger_id,
                                                               metadata))  # fmt: skip
        return self._lac

    async def wait_for_lac(self, previous: int, timeout_s: float) -> int:
        """Return once the LAC exceeds `previous` or the ledger is closed, or at the timeout
        (then the LAC as it is, possibly `previous`). Long-polls the bookies."""
        deadline = trio.current_time() + (timeout_s if math.isfinite(timeout_s) else 1e9)
        while True:
            lac = await self.read_lac()
            remaining = deadline - trio.current_time()
            if lac > previous or self.is_closed or remaining <= 0:
                return lac
            if lac < 0:
                await trio.sleep(min(remaining, _LAC_POLL_INTERVAL_S))
                continue
            await self._long_poll(lac, min(remaining, _LONG_POLL_ROUND_S))

    async def _long_poll(self, previous: int, round_s: float) -> None:
        """Wait until any bookie of the last fragment reports a LAC above `previous`."""
        ensemble = self._metadata.current_ensemble
        async with trio.open_nursery() as nursery:

            async def poll(bookie: str) -> None:
                try:
                    lac = await self._ctx.pool.long_poll_lac(bookie, self.ledger_id, previous,
                                                             round_s)  # fmt: skip
                except LedgerError:
                    await trio.sleep(round_s)  # a dead bookie must not end the round early
                    return
                if lac > previous:
                    self._lac = max(self._lac, lac)
                nursery.cancel_scope.cancel()

            for bookie in ensemble:
                nursery.start_soon(poll, bookie)

    async def close(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()


def status_is_negative(status: Status) -> bool:
    """A read answer that says 'this bookie does not have it' (vs. an error)."""
    return status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER)
