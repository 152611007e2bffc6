"""Range reads through batch requests (READ_ENTRIES): one request brings a run of entries.

A range is cut at fragment boundaries and into chunks of up to _CHUNK_ENTRIES; each chunk goes
to one bookie of its fragment's ensemble (chunks rotate over the ensemble, so several bookies
serve one range), at most _MAX_PARALLEL_BATCHES chunks at a time. A bookie answers as many
entries as fit its caps and our _BATCH_BYTES; the rest of the chunk is asked again from the
same bookie. Only ledgers whose every bookie holds every entry of its fragment (Qw == E, as
BookKeeper 4.17 requires for batch reads) are read this way.

Every entry's digest is checked on its own: an entry that fails it (or a chunk whose bookies
all failed) is handed back as failed, and the caller reads it through the per-entry path, that
bookie last. A bookie answering a batch with BAD_REQUEST does not serve batch reads: its
connection is marked and never asked again; a connection lost under batch requests three times
before any batch answer is treated the same (a bookie older than READ_ENTRIES closes the
connection at an op code it does not know).

This module must never return bytes that failed their digest check, never read past what the
caller asked, and never fence or long-poll (those stay single-entry reads).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from ledger_backend.bookie.protocol import ReadEntriesRequest, ReadEntriesResponse, Response, Status
from ledger_backend.client.bookie_client import (
    BookieConnection,
    LocalBookieConnection,
    check_status,
)
from ledger_backend.client.client_context import ClientContext
from ledger_backend.client.entry_format import decode_entry
from ledger_backend.client.errors import BookieUnavailableError, DigestMismatchError, LedgerError
from ledger_backend.client.ledger_metadata import LedgerMetadata

log = logging.getLogger(__name__)

_CHUNK_ENTRIES = 1024  # entries one chunk covers (a bookie caps its answer at 1024 by default)
_BATCH_BYTES = 4 << 20  # bytes one answer may carry (well under the 16 MiB frame limit)
_MAX_PARALLEL_BATCHES = 4
_LOSSES_BEFORE_GIVING_UP = 3


class BatchReadUnsupported(LedgerError):
    """A bookie answered a batch read with BAD_REQUEST: it does not serve them."""


@dataclass(slots=True)
class _Chunk:
    next_id: int  # first entry not read yet
    end_id: int  # last entry of the chunk
    bookies: list[str]  # to ask, in order; the first is being asked
    last_bookie: str = ""


def batch_capable(ctx: ClientContext, metadata: LedgerMetadata, first: int, last: int) -> bool:
    """Whether first..last can go out as batch reads: Qw == E, and every fragment it touches
    has a bookie whose connection has not refused them."""
    if metadata.write_quorum != metadata.ensemble_size:
        return False
    for _start, _end, ensemble in _fragments(metadata, first, last):
        if not any(ctx.pool.connection(b).batch_reads for b in ensemble):
            return False
    return True


def _fragments(metadata: LedgerMetadata, first: int, last: int
               ) -> list[tuple[int, int, list[str]]]:  # fmt: skip
    """(first entry, last entry, ensemble) of each fragment's part of first..last."""
    out: list[tuple[int, int, list[str]]] = []
    ensembles = metadata.ensembles
    for i, (start, ensemble) in enumerate(ensembles):
        end = ensembles[i + 1][0] - 1 if i + 1 < len(ensembles) else last
        lo, hi = max(start, first), min(end, last)
        if lo <= hi:
            out.append((lo, hi, list(ensemble)))
    return out


async def read_range_batched(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                             first: int, last: int
                             ) -> tuple[list[bytes | None], list[tuple[int, str]]]:  # fmt: skip
    """Verified payloads of first..last (None where every bookie tried failed) and
    (entry id, the bookie that failed it last) of each such entry. Check `batch_capable`
    first."""
    pool = ctx.pool
    mac_key = ctx.mac_key(metadata)
    results: list[bytes | None] = [None] * (last - first + 1)
    failed: list[tuple[int, str]] = []
    chunks: list[_Chunk] = []
    for lo, hi, ensemble in _fragments(metadata, first, last):
        for start in range(lo, hi + 1, _CHUNK_ENTRIES):
            turn = len(chunks) % len(ensemble)
            order = ensemble[turn:] + ensemble[:turn]
            chunks.append(_Chunk(start, min(hi, start + _CHUNK_ENTRIES - 1), order))
    waiting = list(reversed(chunks))
    outstanding = 0
    stopped = False
    all_done = trio.Event()

    def ask(chunk: _Chunk) -> None:
        nonlocal outstanding
        while chunk.bookies and not pool.connection(chunk.bookies[0]).batch_reads:
            chunk.last_bookie = chunk.bookies.pop(0)
        if not chunk.bookies:
            give_up(chunk)
            return
        bookie = chunk.bookies[0]
        chunk.last_bookie = bookie
        outstanding += 1
        first_id, count = chunk.next_id, chunk.end_id - chunk.next_id + 1
        pool.connection(bookie).submit(
            lambda rid: ReadEntriesRequest(rid, ledger_id, first_id, count, _BATCH_BYTES),
            lambda outcome: on_answer(chunk, bookie, first_id, count, outcome),
        )

    def give_up(chunk: _Chunk) -> None:
        failed.extend((e, chunk.last_bookie) for e in range(chunk.next_id, chunk.end_id + 1))
        chunk.next_id = chunk.end_id + 1

    def on_answer(chunk: _Chunk, bookie: str, first_id: int, count: int,
                  outcome: Response | LedgerError) -> None:  # fmt: skip
        nonlocal outstanding
        outstanding -= 1
        conn = pool.connection(bookie)
        try:
            if isinstance(outcome, LedgerError):
                raise outcome
            if outcome.status is Status.BAD_REQUEST:
                raise BatchReadUnsupported(f"bookie {bookie} does not serve batch reads")
            check_status(outcome, bookie)
            if (not isinstance(outcome, ReadEntriesResponse) or not outcome.bodies
                    or outcome.first_entry_id != first_id
                    or len(outcome.bodies) > count):  # fmt: skip
                raise BookieUnavailableError(f"bookie {bookie}: batch answer does not match "
                                             f"its request")  # fmt: skip
        except LedgerError as exc:
            note_failure(conn, bookie, exc)
            chunk.bookies.pop(0)
            if not stopped:
                ask(chunk)
            pump()
            return
        conn.batch_answers += 1
        for offset, body in enumerate(outcome.bodies):
            entry_id = first_id + offset
            try:
                decoded = decode_entry(body, ledger_id=ledger_id, entry_id=entry_id,
                                       mac_key=mac_key)
            except DigestMismatchError as exc:
                log.error("ledger %d entry %d from %s: %s", ledger_id, entry_id, bookie, exc)
                failed.append((entry_id, bookie))
                continue
            results[entry_id - first] = decoded.payload
        chunk.next_id = first_id + len(outcome.bodies)
        if chunk.next_id <= chunk.end_id and not stopped:
            ask(chunk)  # the rest of the chunk, from the same bookie
        pump()

    def note_failure(conn: BookieConnection | LocalBookieConnection, bookie: str,
                     exc: LedgerError) -> None:  # fmt: skip
        if isinstance(exc, BatchReadUnsupported):
            log.warning("ledger client: bookie %s does not serve batch reads; reading it entry "
                        "by entry", bookie)  # fmt: skip
            conn.batch_reads = False
        elif isinstance(exc, BookieUnavailableError) and not conn.batch_answers:
            conn.batch_losses += 1
            if conn.batch_losses >= _LOSSES_BEFORE_GIVING_UP:
                log.warning("ledger client: bookie %s dropped the connection at %d batch reads "
                            "and answered none; reading it entry by entry", bookie,
                            conn.batch_losses)  # fmt: skip
                conn.batch_reads = False

    pumping = False

    def pump() -> None:
        # Re-entrant calls (an answer delivered synchronously inside submit) return at once;
        # the outer loop carries on.
        nonlocal pumping
        if pumping:
            return
        pumping = True
        try:
            while waiting and outstanding < _MAX_PARALLEL_BATCHES and not stopped:
                ask(waiting.pop())
        finally:
            pumping = False
        if outstanding == 0 and (not waiting or stopped):
            all_done.set()

    pump()
    try:
        await all_done.wait()  # every request has a deadline: an answer always comes
    finally:
        stopped = True  # cancelled: answers still due ask nothing more
    return results, failed
