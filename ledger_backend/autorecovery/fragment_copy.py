"""Re-replicating one ledger: copy every fragment that has a copy on a lost bookie.

For each fragment (an ensemble and its entry range) naming a lost bookie at ensemble index j:
choose a replacement among the available bookies that is not already in that ensemble (two
copies never share a bookie), read every entry whose write set contains j from a surviving
bookie of its write set (digest verified), store it on the replacement with a recovery add
(the stored bytes unchanged: they carry their own ledger id, entry id and digest), and only
then CAS the fragment's new ensemble into the ledger metadata.  A CAS conflict (the writer
changed its ensemble or closed the ledger meanwhile) re-reads the metadata and retries; the
writer only ever touches the last fragment, so an earlier fragment's swap is never lost.

An OPEN ledger's last fragment is still being written: it is copied only after the ledger is
fenced and closed by recovery (`fence_open=True`; auto-recovery does this once the open-ledger
grace period has passed, `recover` does it at once).

This module must never put a replacement in the metadata before every entry it must hold is
stored on it, and never write metadata without the version it read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    Status,
)
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.client_context import ClientContext, MetadataVersionConflict
from ledger_backend.client.entry_format import decode_entry
from ledger_backend.client.errors import LedgerError, LedgerRecoveryError
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState

log = logging.getLogger("ledgerwire.autorecovery")

_PARALLEL_COPIES = 64
_CAS_ATTEMPTS = 20


@dataclass
class ReplicationOutcome:
    ledger_id: int
    complete: bool  # no fragment names a lost bookie any more
    entries_copied: int = 0
    fragments_replaced: int = 0
    fenced: bool = False
    notes: list[str] = field(default_factory=list)


def fragments_on(metadata: LedgerMetadata, bookies: set[str]) -> list[int]:
    """Indexes of the fragments whose ensemble names any of `bookies`."""
    return [i for i, (_, ens) in enumerate(metadata.ensembles) if bookies & set(ens)]


def fragment_last_entry(metadata: LedgerMetadata, index: int) -> int | None:
    """The last entry of fragment `index`; None for the open last fragment of an OPEN ledger."""
    if index + 1 < len(metadata.ensembles):
        return metadata.ensembles[index + 1][0] - 1
    if metadata.state is LedgerState.CLOSED:
        return metadata.last_entry_id
    return None


async def _read_surviving(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                          entry_id: int, lost: set[str]) -> bytes:
    problems: list[str] = []
    mac_key = ctx.mac_key(metadata)
    for bookie in metadata.write_set_bookies(entry_id):
        if bookie in lost:
            continue
        try:
            response = await ctx.pool.connection(bookie).request(
                lambda rid: ReadEntryRequest(rid, ledger_id, entry_id, False))
        except LedgerError as exc:
            problems.append(f"{bookie}: {exc}")
            continue
        if isinstance(response, ReadEntryResponse) and response.status is Status.OK:
            try:
                decode_entry(response.body, ledger_id=ledger_id, entry_id=entry_id,
                             mac_key=mac_key)
            except LedgerError as exc:
                problems.append(f"{bookie}: {exc}")
                continue
            return bytes(response.body)
        problems.append(f"{bookie}: {response.status.name}")
    raise LedgerRecoveryError(
        f"ledger {ledger_id} entry {entry_id}: no surviving copy readable ({problems})")


async def _store_on(ctx: ClientContext, bookie: str, ledger_id: int, entry_id: int,
                    body: bytes, key: bytes, mac_key: bytes | None) -> None:  # fmt: skip
    decoded = decode_entry(body, ledger_id=ledger_id, entry_id=entry_id, mac_key=mac_key)
    response = await ctx.pool.connection(bookie).request(
        lambda rid: AddEntryRequest(rid, ledger_id, entry_id, decoded.lac, True, body, key))
    if not (isinstance(response, AddEntryResponse) and response.status is Status.OK):
        raise LedgerRecoveryError(
            f"ledger {ledger_id} entry {entry_id}: {bookie} refused the copy: "
            f"{response.status.name}")


async def copy_fragment(ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata,
                        index: int, replacements: dict[int, str], lost: set[str]) -> int:
    """Copy to each replacement (ensemble index -> bookie) the entries of fragment `index`
    it must hold; returns how many copies were stored."""
    first = metadata.ensembles[index][0]
    last = fragment_last_entry(metadata, index)
    assert last is not None, "the open fragment of an open ledger is not copied"
    work = [(e, bookie) for e in range(first, last + 1)
            for j, bookie in replacements.items() if j in metadata.write_set(e)]
    limiter = trio.CapacityLimiter(_PARALLEL_COPIES)
    errors: list[LedgerError] = []
    key = ctx.master_key(metadata)  # recovery adds present the ledger's key
    mac_key = ctx.mac_key(metadata)

    async def copy(entry_id: int, bookie: str) -> None:
        async with limiter:
            if errors:
                return
            try:
                body = await _read_surviving(ctx, ledger_id, metadata, entry_id, lost)
                await _store_on(ctx, bookie, ledger_id, entry_id, body, key, mac_key)
            except LedgerError as exc:
                errors.append(exc)

    async with trio.open_nursery() as nursery:
        for entry_id, bookie in work:
            nursery.start_soon(copy, entry_id, bookie)
    if errors:
        raise errors[0]
    return len(work)


async def _swap_ensemble(ctx: ClientContext, ledger_id: int, first_entry: int,
                         old: tuple[str, ...], replacements: dict[int, str]) -> bool:
    """CAS the fragment starting at `first_entry` from `old` to the replaced ensemble."""
    for _ in range(_CAS_ATTEMPTS):
        metadata, version = await ctx.read_metadata(ledger_id)
        ensembles = list(metadata.ensembles)
        position = next((i for i, (f, ens) in enumerate(ensembles)
                         if f == first_entry and ens == old), None)
        if position is None:
            return False  # the fragment changed (replaced by its writer): audit again
        new = list(old)
        for j, bookie in replacements.items():
            new[j] = bookie
        ensembles[position] = (first_entry, tuple(new))
        try:
            await ctx.cas_metadata(ledger_id, metadata.replace(ensembles=tuple(ensembles)),
                                   version)
            return True
        except MetadataVersionConflict:
            continue
    return False


async def replicate_ledger(bk: BookKeeper, ledger_id: int, lost: set[str], *,
                           fence_open: bool) -> ReplicationOutcome:
    """Copy every fragment of `ledger_id` that names a bookie in `lost` (see module doc)."""
    ctx = bk.context
    outcome = ReplicationOutcome(ledger_id, complete=False)
    metadata, _ = await ctx.read_metadata(ledger_id)
    if metadata.state is not LedgerState.CLOSED and fence_open \
            and lost & set(metadata.current_ensemble):
        await bk.open_ledger(ledger_id, recovery=True)  # fence, recover, close
        outcome.fenced = True
        metadata, _ = await ctx.read_metadata(ledger_id)
    available = set(await ctx.available_bookies())
    for index in fragments_on(metadata, lost):
        if fragment_last_entry(metadata, index) is None:
            outcome.notes.append("open fragment waits for the ledger to be closed")
            continue
        first, ensemble = metadata.ensembles[index]
        replacements: dict[int, str] = {}
        chosen = list(ensemble)
        for j, bookie in enumerate(ensemble):
            if bookie in lost:
                replacement = ctx.placement.choose_replacement(available - lost, chosen,
                                                               exclude=lost)
                replacements[j] = chosen[j] = replacement
        outcome.entries_copied += await copy_fragment(ctx, ledger_id, metadata, index,
                                                      replacements, lost)
        if await _swap_ensemble(ctx, ledger_id, first, ensemble, replacements):
            outcome.fragments_replaced += 1
            log.info("ledger %d fragment at entry %d: %s -> %s", ledger_id, first,
                     [ensemble[j] for j in replacements], list(replacements.values()))
        else:
            outcome.notes.append(f"fragment at entry {first} changed during the copy")
    metadata, _ = await ctx.read_metadata(ledger_id)
    outcome.complete = not fragments_on(metadata, lost)
    return outcome
