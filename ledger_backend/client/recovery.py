"""Ledger recovery: fence an OPEN ledger, find where it really ends, close it there.

Steps (after BookKeeper; see NOTES.md "Recovery"):
1. CAS the metadata OPEN -> IN_RECOVERY (an IN_RECOVERY ledger is recovered again as it is).
2. Fence every bookie of the last fragment (a fencing read of entry -1) and require answers
   from Qw - Qa + 1 bookies of every write set: then the old writer can no longer reach Qa
   anywhere, so no further add of it is ever acknowledged. The LAC is the max they report.
3. From LAC + 1 on, read each entry with fencing recovery reads (issue 2614: reads must fence
   too) from its write set. An entry is recovered if any bookie has it (digest verified); it is
   absent after Qw - Qa + 1 negative answers; anything else is undecidable and recovery fails
   (the ledger stays IN_RECOVERY for a later attempt).
4. Re-write each recovered entry (recovery add) to its whole write quorum; Qa must store it.
   Bookies of the last fragment that did not answer the fence are replaced in a new fragment
   starting at LAC + 1, as BookKeeper's recovery does with an ensemble change. That fragment
   is only planned here (not written to the metadata store): while recovery runs, the stored
   metadata keeps the writer's own ensembles, so a later recovery attempt (after this one
   died or failed) reads from bookies the writer really wrote to, never from a replacement
   that holds nothing and would count as a false "no such entry" witness.
5. One CAS installs the replacement fragment (if any entry was re-written to it) together
   with CLOSED at the last recovered entry with its length. If that CAS conflicts and the
   ledger is not CLOSED, the ensembles must still be those this recovery read; otherwise
   recovery raises (to be retried from scratch) instead of closing with bookies that may not
   hold the recovered entries.

Must never close a ledger before an entry the writer had acknowledged: every step that cannot
decide raises instead of guessing.
"""

from __future__ import annotations

import logging

import trio

from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    Response,
    Status,
)
from ledger_backend.client.client_context import ClientContext, MetadataVersionConflict
from ledger_backend.client.entry_format import decode_entry
from ledger_backend.client.errors import (
    DigestMismatchError,
    LedgerError,
    LedgerRecoveryError,
    NotEnoughBookiesError,
)
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState
from ledger_backend.client.read_handle import read_entry_from_bookies

log = logging.getLogger(__name__)

_RECOVERY_BATCH = 16
_RECOVERY_READ_ROUNDS = 3
_RECOVERY_READ_BACKOFF_S = 0.2


async def _mark_in_recovery(ctx: ClientContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """CAS OPEN -> IN_RECOVERY; returns the metadata as it is (CLOSED ones untouched)."""
    while True:
        metadata, version = await ctx.read_metadata(ledger_id)
        if metadata.state is not LedgerState.OPEN:
            return metadata, version
        in_recovery = metadata.replace(state=LedgerState.IN_RECOVERY)
        try:
            return in_recovery, await ctx.cas_metadata(ledger_id, in_recovery, version)
        except MetadataVersionConflict:
            continue  # the writer changed its ensemble or closed: look again


async def recover_ledger(ctx: ClientContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """Fence, recover and close `ledger_id`; return its CLOSED metadata and version."""
    metadata, version = await _mark_in_recovery(ctx, ledger_id)
    if metadata.state is LedgerState.CLOSED:
        return metadata, version
    read_ensembles = metadata.ensembles  # the writer's ensembles, as this recovery read them
    lac, answered = await fence_last_fragment(ctx, ledger_id, metadata)
    target = _RewriteTarget(ctx, ledger_id, metadata, lac, answered)
    last_entry_id, length = await _recover_entries(ctx, ledger_id, metadata, lac, target)
    if length is None:
        if last_entry_id >= 0:
            entry = await read_entry_from_bookies(ctx, ledger_id, metadata, last_entry_id,
                                                  fence=True)  # fmt: skip
            length = entry.ledger_length
        else:
            length = 0
    # The replacement fragment (only if entries were re-written to it) and CLOSED in one CAS.
    closed = target.metadata.replace(
        state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length
    )
    while True:
        try:
            version = await ctx.cas_metadata(ledger_id, closed, version)
        except MetadataVersionConflict:
            current, version = await ctx.read_metadata(ledger_id)
            if current.state is LedgerState.CLOSED:
                return current, version  # a concurrent recovery finished first
            if current.ensembles != read_ensembles:
                raise LedgerRecoveryError(
                    f"ledger {ledger_id} ensembles changed during recovery (another "
                    f"recovery?); not closing with bookies this recovery did not write to"
                ) from None
            closed = current.replace(  # only non-ensemble fields changed: keep them
                ensembles=target.metadata.ensembles, state=LedgerState.CLOSED,
                last_entry_id=last_entry_id, length=length,
            )  # fmt: skip
            continue
        log.info("ledger %d recovered and closed at entry %d (%d bytes)", ledger_id,
                 last_entry_id, length)  # fmt: skip
        return closed, version


def write_sets_covered(metadata: LedgerMetadata, answered: set[int]) -> bool:
    """True if every write set of the ensemble has >= Qw - Qa + 1 answered indexes."""
    needed = metadata.write_quorum - metadata.ack_quorum + 1
    for start in range(metadata.ensemble_size):
        write_set = metadata.write_set(start)
        if sum(1 for i in write_set if i in answered) < needed:
            return False
    return True


async def fence_last_fragment(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata
                              ) -> tuple[int, set[int]]:  # fmt: skip
    """Fence the last fragment's bookies; return the highest LAC they report and the ensemble
    indexes that answered."""
    first_entry, ensemble = metadata.ensembles[-1]
    key = ctx.master_key(metadata)
    answered: set[int] = set()
    lacs: list[int] = [first_entry - 1]
    failures: list[str] = []

    async def fence(index: int, bookie: str) -> None:
        try:
            response = await ctx.pool.connection(bookie).request(
                lambda rid: ReadEntryRequest(rid, ledger_id, -1, True, master_key=key)
            )
        except LedgerError as exc:
            failures.append(f"{bookie}: {exc}")
            return
        if response.status in (Status.OK, Status.NO_SUCH_LEDGER, Status.NO_SUCH_ENTRY):
            answered.add(index)
            if isinstance(response, ReadEntryResponse) and response.status is Status.OK:
                lacs.append(response.lac)
        else:
            failures.append(f"{bookie}: {response.status.name}")

    async with trio.open_nursery() as nursery:
        for index, bookie in enumerate(ensemble):
            nursery.start_soon(fence, index, bookie)
    if not write_sets_covered(metadata, answered):
        raise LedgerRecoveryError(
            f"ledger {ledger_id}: could not fence enough bookies of {list(ensemble)}: {failures}"
        )
    return max(lacs), answered


class _RewriteTarget:
    """Where recovered entries are re-written: the last fragment, or, if some of its bookies did
    not answer the fence, a new fragment from LAC + 1 with those bookies replaced, so that a
    dead bookie does not keep entries below Qa. Planned on first use, in memory only: the
    fragment reaches the metadata store with the CLOSED state in recover_ledger's single CAS,
    after the recovered entries were written to it (`metadata` is what that CAS installs)."""

    def __init__(self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                 lac: int, answered: set[int]) -> None:  # fmt: skip
        self._ctx = ctx
        self._ledger_id = ledger_id
        self.metadata = metadata
        self._first_entry = lac + 1
        self._dead = sorted(set(range(metadata.ensemble_size)) - answered)
        self._ready = not self._dead

    async def write_metadata(self) -> LedgerMetadata:
        if self._ready:
            return self.metadata
        self._ready = True
        ensemble = list(self.metadata.current_ensemble)
        dead_bookies = [ensemble[i] for i in self._dead]
        try:
            available = await self._ctx.available_bookies()
            for index in self._dead:
                ensemble[index] = self._ctx.placement.choose_replacement(
                    available, ensemble, exclude=dead_bookies
                )
        except NotEnoughBookiesError as exc:
            log.warning("ledger %d: recovery keeps dead bookies %s: %s", self._ledger_id,
                        dead_bookies, exc)  # fmt: skip
            return self.metadata
        proposed = self.metadata.with_new_ensemble(self._first_entry, ensemble)
        self.metadata = proposed  # installed only by the closing CAS
        log.info("ledger %d: recovery replaces %s, new fragment from entry %d", self._ledger_id,
                 dead_bookies, self._first_entry)  # fmt: skip
        return proposed


async def _recovery_read(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, entry_id: int
) -> bytes | None:
    """The stored bytes of `entry_id` if any bookie has it, None if enough say it is absent.

    A bookie that times out or fails is asked again (up to _RECOVERY_READ_ROUNDS rounds, with a
    short back-off): a slow or restarting bookie must not fail the recovery of a healthy
    ledger. A bookie's "no such entry" is kept across rounds (the ledger is fenced there, so
    the entry cannot appear on it later)."""
    bookies = metadata.write_set_bookies(entry_id)
    needed_negative = metadata.write_quorum - metadata.ack_quorum + 1
    negative: set[str] = set()
    problems: dict[str, str] = {}
    for attempt in range(_RECOVERY_READ_ROUNDS):
        if attempt:
            await trio.sleep(_RECOVERY_READ_BACKOFF_S * attempt)
        asked = [bookie for bookie in bookies if bookie not in negative]
        found = await _ask_for_entry(ctx, ledger_id, metadata, entry_id, asked, negative,
                                     needed_negative, problems)  # fmt: skip
        if found is not None:
            return found
        if len(negative) >= needed_negative:
            return None
    raise LedgerRecoveryError(
        f"ledger {ledger_id}: cannot tell whether entry {entry_id} exists "
        f"({len(negative)} negative answers of {needed_negative} needed after "
        f"{_RECOVERY_READ_ROUNDS} rounds; {sorted(problems.items())})"
    )


async def _ask_for_entry(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, entry_id: int,
    bookies: list[str], negative: set[str], needed_negative: int, problems: dict[str, str],
) -> bytes | None:  # fmt: skip
    """One round of fencing recovery reads: the entry's bytes as soon as one bookie has it;
    otherwise None, with `negative` and `problems` updated per bookie."""
    key = ctx.master_key(metadata)
    mac_key = ctx.mac_key(metadata)
    found: list[bytes] = []

    async with trio.open_nursery() as nursery:

        async def ask(bookie: str) -> None:
            try:
                response = await ctx.pool.connection(bookie).request(
                    lambda rid: ReadEntryRequest(rid, ledger_id, entry_id, True, master_key=key)
                )
            except LedgerError as exc:
                problems[bookie] = str(exc)
                return
            if response.status is Status.OK and isinstance(response, ReadEntryResponse):
                try:
                    decode_entry(response.body, ledger_id=ledger_id, entry_id=entry_id,
                                 mac_key=mac_key)
                except DigestMismatchError as exc:
                    problems[bookie] = str(exc)
                    return
                found.append(response.body)
                nursery.cancel_scope.cancel()
            elif response.status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER):
                negative.add(bookie)
                problems.pop(bookie, None)
                if len(negative) >= needed_negative:
                    nursery.cancel_scope.cancel()
            else:
                problems[bookie] = response.status.name

        for bookie in bookies:
            nursery.start_soon(ask, bookie)
    return found[0] if found else None


async def _rewrite_entry(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, entry_id: int, lac: int,
    stored: bytes,
) -> None:  # fmt: skip
    """Recovery-add a recovered entry to its whole write set; Qa must store it."""
    bookies = metadata.write_set_bookies(entry_id)
    key = ctx.master_key(metadata)
    stored_ok: list[str] = []
    problems: list[str] = []

    async def add(bookie: str) -> None:
        try:
            response: Response = await ctx.pool.connection(bookie).request(
                lambda rid: AddEntryRequest(rid, ledger_id, entry_id, lac, True, stored, key)
            )
        except LedgerError as exc:
            problems.append(f"{bookie}: {exc}")
            return
        if isinstance(response, AddEntryResponse) and response.status is Status.OK:
            stored_ok.append(bookie)
        else:
            problems.append(f"{bookie}: {response.status.name}")

    async with trio.open_nursery() as nursery:
        for bookie in bookies:
            nursery.start_soon(add, bookie)
    if len(stored_ok) < metadata.ack_quorum:
        raise LedgerRecoveryError(
            f"ledger {ledger_id}: recovered entry {entry_id} stored on only {stored_ok}: {problems}"
        )
    if problems:
        log.warning("ledger %d entry %d under-replicated after recovery: %s", ledger_id,
                    entry_id, problems)  # fmt: skip


async def _read_batch(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, batch: list[int]
) -> dict[int, bytes | None | LedgerError]:
    outcomes: dict[int, bytes | None | LedgerError] = {}

    async def read(entry_id: int) -> None:
        try:
            outcomes[entry_id] = await _recovery_read(ctx, ledger_id, metadata, entry_id)
        except LedgerError as exc:
            outcomes[entry_id] = exc

    async with trio.open_nursery() as nursery:
        for entry_id in batch:
            nursery.start_soon(read, entry_id)
    return outcomes


async def _rewrite_batch(
    ctx: ClientContext, ledger_id: int, target: _RewriteTarget,
    recovered: list[tuple[int, bytes]],
) -> None:  # fmt: skip
    if not recovered:
        return
    metadata = await target.write_metadata()
    mac_key = ctx.mac_key(metadata)
    errors: list[LedgerError] = []

    async def rewrite(entry_id: int, stored: bytes) -> None:
        decoded = decode_entry(stored, ledger_id=ledger_id, entry_id=entry_id, mac_key=mac_key)
        try:
            await _rewrite_entry(ctx, ledger_id, metadata, entry_id, decoded.lac, stored)
        except LedgerError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for entry_id, stored in recovered:
            nursery.start_soon(rewrite, entry_id, stored)
    if errors:
        raise errors[0]


async def _recover_entries(
    ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, lac: int,
    target: _RewriteTarget,
) -> tuple[int, int | None]:  # fmt: skip
    """Read forward from lac + 1 and re-write what exists. Returns (last entry id, its ledger
    length or None if no entry past the LAC was found)."""
    last_entry_id = lac
    length: int | None = None
    next_entry = lac + 1
    while True:
        batch = list(range(next_entry, next_entry + _RECOVERY_BATCH))
        outcomes = await _read_batch(ctx, ledger_id, metadata, batch)
        recovered: list[tuple[int, bytes]] = []
        ended = False
        for entry_id in batch:  # in order: the ledger ends at the first absent entry
            outcome = outcomes[entry_id]
            if isinstance(outcome, LedgerError):
                raise outcome
            if outcome is None:
                ended = True
                break
            recovered.append((entry_id, outcome))
        await _rewrite_batch(ctx, ledger_id, target, recovered)
        if recovered:
            last_entry_id, stored = recovered[-1]
            length = decode_entry(stored, ledger_id=ledger_id, entry_id=last_entry_id,
                                  mac_key=ctx.mac_key(metadata)).ledger_length
        if ended:
            return last_entry_id, length
        next_entry += _RECOVERY_BATCH
