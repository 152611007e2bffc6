"""ReadHandle: reads entries of a ledger from its bookies, digests verified on every read.

A closed ledger is readable up to its last entry; an open one up to the LAC learned from the
bookies of its last fragment (the highest LAC they saw piggybacked on adds). Each entry is read
from a bookie of its write set, trying the next one on an error, a timeout or a digest
mismatch. A range goes out as batch reads (client/batch_reads.py: a run of entries per
request) when every bookie of a fragment holds all its entries (Qw == E), else as one request
per entry through callbacks (no task per entry); failures are retried entry by entry. A range
that a bookie of this process holds whole (one fragment, Qw == E) is read from it in one call.
This module must never return bytes that failed their CRC-32C check, and never read past the
LAC (use recovery for that).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping

import trio

from ledger_backend.bookie.protocol import ReadEntryRequest, ReadEntryResponse, Response, Status
from ledger_backend.client.batch_reads import batch_capable, read_range_batched
from ledger_backend.client.bookie_client import LocalBookieConnection, check_status
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
    *, fence: bool = False, last_resort: str | None = None,
) -> DecodedEntry:  # fmt: skip
    """Read and verify one entry, trying each bookie of its write set in turn (`last_resort`,
    a bookie that just failed for this entry, only after the others)."""
    errors: list[LedgerError] = []
    mac_key = ctx.mac_key(metadata)
    bookies = metadata.write_set_bookies(entry_id)
    if last_resort in bookies:
        bookies = [b for b in bookies if b != last_resort] + [last_resort]
    for bookie in bookies:
        try:
            response = await ctx.pool.connection(bookie).request(
                lambda rid: ReadEntryRequest(rid, ledger_id, entry_id, fence,
                                             master_key=ctx.master_key(metadata) if fence
                                             else b"")
            )
            check_status(response, bookie)
            assert isinstance(response, ReadEntryResponse)
            return decode_entry(response.body, ledger_id=ledger_id, entry_id=entry_id,
                                mac_key=mac_key)
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


async def read_range_from_bookies(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                                  first: int, last: int) -> list[bytes]:  # fmt: skip
    """Verified payloads of entries first..last (the caller knows they exist: at most the LAC,
    or entries it checked otherwise): batch reads where the ledger allows them, else one
    request per entry; what fails is retried entry by entry from the other bookies."""
    if batch_capable(ctx, metadata, first, last):
        results, failed = await read_range_batched(ctx, ledger_id, metadata, first, last)
    else:
        results, failed = await _read_range_once(ctx, ledger_id, metadata, first, last)
    if failed:
        await _retry_failed(ctx, ledger_id, metadata, first, results, failed)
    return [r if r is not None else b"" for r in results]


async def _retry_failed(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, first: int,
                        results: list[bytes | None], failed: list[tuple[int, str]]) -> None:
    """Entries whose first bookie failed (error, timeout, bad digest) go through the full
    per-entry path, in parallel, the failed bookie tried last; the first error is raised."""
    limiter = trio.Semaphore(_MAX_PARALLEL_READS)
    errors: list[LedgerError] = []

    async with trio.open_nursery() as nursery:

        async def retry(entry_id: int, bookie: str) -> None:
            try:
                async with limiter:
                    entry = await read_entry_from_bookies(ctx, ledger_id, metadata, entry_id,
                                                          last_resort=bookie)  # fmt: skip
            except LedgerError as exc:  # raised plainly below, not in an ExceptionGroup
                errors.append(exc)
                nursery.cancel_scope.cancel()
                return
            results[entry_id - first] = entry.payload

        for entry_id, bookie in sorted(failed):
            nursery.start_soon(retry, entry_id, bookie)
    if errors:
        raise errors[0]


async def _read_range_once(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                           first: int, last: int
                           ) -> tuple[list[bytes | None], list[tuple[int, str]]]:  # fmt: skip
    """Ask the first bookie of each entry's write set, at most _MAX_PARALLEL_READS at a time,
    through request callbacks (no task per entry). Returns the verified payloads (None where
    that bookie failed) and (entry id, bookie) of each failure."""
    pool = ctx.pool
    mac_key = ctx.mac_key(metadata)
    results: list[bytes | None] = [None] * (last - first + 1)
    failed: list[tuple[int, str]] = []  # (entry id, the bookie that failed it)
    all_answered = trio.Event()
    next_id = first
    outstanding = 0
    pumping = False

    def pump() -> None:
        # Keep up to _MAX_PARALLEL_READS requests out. Re-entrant calls (an answer delivered
        # synchronously inside submit) return at once; the outer loop carries on.
        nonlocal next_id, outstanding, pumping
        if pumping:
            return
        pumping = True
        try:
            while next_id <= last and outstanding < _MAX_PARALLEL_READS:
                entry_id = next_id
                next_id += 1
                outstanding += 1
                bookie = metadata.write_set_bookies(entry_id)[0]
                pool.connection(bookie).submit(
                    functools.partial(ReadEntryRequest, ledger_id=ledger_id,
                                      entry_id=entry_id, fence=False),
                    functools.partial(on_answer, entry_id, bookie),
                )
        finally:
            pumping = False
        if next_id > last and outstanding == 0:
            all_answered.set()

    def on_answer(entry_id: int, bookie: str, outcome: Response | LedgerError) -> None:
        nonlocal outstanding
        outstanding -= 1
        try:
            if isinstance(outcome, LedgerError):
                raise outcome
            check_status(outcome, bookie)
            assert isinstance(outcome, ReadEntryResponse)
            decoded = decode_entry(outcome.body, ledger_id=ledger_id, entry_id=entry_id,
                                   mac_key=mac_key)
            results[entry_id - first] = decoded.payload
        except LedgerError:
            failed.append((entry_id, bookie))
        pump()

    pump()
    try:
        await all_answered.wait()  # every request has a deadline: an answer always comes
    finally:
        next_id = last + 1  # cancelled: answers still due send nothing more
    return results, failed


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
        if first == last:
            entry = await read_entry_from_bookies(self._ctx, self.ledger_id, self._metadata, first)
            return [entry.payload]
        local = await self._read_range_locally(first, last)
        if local is not None:
            return local
        return await read_range_from_bookies(self._ctx, self.ledger_id, self._metadata, first,
                                             last)  # fmt: skip

    async def _read_range_locally(self, first: int, last: int) -> list[bytes] | None:
        """The whole range from one bookie of this process holding every entry of it (one
        fragment, and Qw == E so each bookie of the ensemble has them all), digests verified
        here as on any read; None when that does not apply or fails (then entry by entry)."""
        metadata = self._metadata
        if metadata.write_quorum != metadata.ensemble_size:
            return None
        ensemble = metadata.ensemble_for_entry(first)
        if metadata.ensemble_for_entry(last) is not ensemble:
            return None
        for bookie in ensemble:
            conn = self._ctx.pool.connection(bookie)
            if isinstance(conn, LocalBookieConnection):
                break
        else:
            return None
        mac_key = self._ctx.mac_key(metadata)
        bodies = await conn.read_entries(self.ledger_id, first, last)
        if bodies is None or len(bodies) != last - first + 1:
            return None
        try:
            return [decode_entry(body, ledger_id=self.ledger_id, entry_id=first + i,
                                 mac_key=mac_key).payload
                    for i, body in enumerate(bodies)]  # fmt: skip
        except DigestMismatchError as exc:
            log.error("ledger %d: local range read %d..%d: %s", self.ledger_id, first, last, exc)
            return None

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
