"""Rewriting closed ledgers of a managed ledger and swapping the rewrites into its list.

A rewrite (compaction, for Kafka) copies chosen entries of a run of CLOSED ledgers into new
ledgers and then replaces the run with them in the managed ledger's list. The steps, in this
order, each a durability point with a crash point of the same name:

  1. an output ledger is created and its id is added to the node's "pending" list (CAS)
     BEFORE any entry is written to it        -- managed_ledger.rewrite.after_pending
  2. the surviving entries are appended and the output is closed
                                              -- managed_ledger.rewrite.before_swap
  3. ONE compare-and-set of the node replaces every rewritten run by its output (or by
     nothing, when no entry survived), moves the outputs from "pending" into the list and
     puts the old ids on "garbage"          -- managed_ledger.rewrite.after_swap
  4. the old ledgers (and empty outputs) are deleted -- managed_ledger.rewrite.after_delete
  5. a CAS takes them off "garbage".

So the list always names either the old run or its rewrite, never both and never neither: no
range of the log is missing or doubled. A crash before 3 leaves the old list and a pending
output, which the next owner deletes when it opens the managed ledger; a crash after 3
leaves garbage, which the same clean-up deletes. The output takes the run's place in log
order through its `replaced` range (metadata_format.py), because its id is newer than the
ids of the ledgers after it.

Readers that hold a position in a swapped-out ledger continue where the entry after it now
lives: the managed ledger remembers, for each swapped-out ledger, which of its entries
survived and where they went (`Relocation`). This module decides nothing about WHICH entries
survive (that is the caller's rule, e.g. Kafka's keys) and must never touch the open ledger.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.client.errors import LedgerError
from ledger_backend.managed_ledger.client_protocol import BookKeeperLike, WriteHandleLike
from ledger_backend.managed_ledger.metadata_format import LedgerRecord
from ledger_backend.managed_ledger.types import (
    ManagedLedgerConfig,
    ManagedLedgerError,
    Position,
)

log = logging.getLogger(__name__)

REWRITE_CRASH_POINTS = (
    "managed_ledger.rewrite.after_pending",
    "managed_ledger.rewrite.before_swap",
    "managed_ledger.rewrite.after_swap",
    "managed_ledger.rewrite.after_delete",
)


class ManagedLedger(Protocol):
    """What this friend module uses of managed_ledger.ManagedLedger (its private state too:
    the swap must happen under the same lock and CAS as every other list change)."""

    name: str
    config: ManagedLedgerConfig
    _bk: BookKeeperLike
    _meta_lock: trio.Lock
    _records: list[LedgerRecord]
    _pending: list[int]
    _garbage: list[int]
    _relocations: dict[int, Relocation]
    _cache: Any  # TailCache
    _readers: Any  # LedgerReaders
    _log_reader: Any  # LogReader

    @property
    def current_ledger_id(self) -> int: ...

    @property
    def is_fenced(self) -> bool: ...

    @property
    def is_closed(self) -> bool: ...

    def _check_writable(self) -> None: ...

    def _notify_entries(self) -> None: ...

    async def _write_metadata(
        self,
        records: list[LedgerRecord],
        *,
        pending: list[int] | None = None,
        garbage: list[int] | None = None,
    ) -> None: ...

    async def _delete_ledger_quietly(self, ledger_id: int) -> None: ...

    async def _delete_objects(self, objects: list[Any]) -> None: ...


class RewriteConflictError(ManagedLedgerError):
    """The ledgers a rewrite replaces are no longer a listed run of closed ledgers (trimmed,
    or rewritten by someone else meanwhile): the rewrite was dropped, nothing changed."""


@dataclass(frozen=True)
class Relocation:
    """Where the surviving entries of one swapped-out ledger went."""

    new_ledger_id: int | None  # None: nothing of its run survived
    first_entry: int  # entry id in the new ledger of its first survivor (or where it would be)
    survivors: tuple[int, ...]  # its surviving entry ids, increasing
    order_key: int  # the swapped-out ledger's place in log order

    def position_for(self, entry_id: int) -> Position | None:
        """The new position of the first survivor at or after `entry_id` (None: none here)."""
        if self.new_ledger_id is None:
            return None
        return Position(
            self.new_ledger_id, self.first_entry + bisect.bisect_left(self.survivors, entry_id)
        )


@dataclass
class _Group:
    handle: WriteHandleLike | None = None
    entries: int = 0
    size: int = 0
    first_entry: dict[int, int] = field(default_factory=dict)
    survivors: dict[int, list[int]] = field(default_factory=dict)
    old_ids: list[int] = field(default_factory=list)


class LedgerRewrite:
    """One rewrite of a managed ledger: `write` surviving entries run by run, `end_run` after
    each run of old ledgers, then `commit` (or `abort`). Obtained from ManagedLedger.rewrite()."""

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self._group = _Group()
        self._done: list[_Group] = []
        self._finished = False

    @property
    def outputs(self) -> list[int]:
        groups = [*self._done, self._group]
        return [g.handle.ledger_id for g in groups if g.handle is not None]

    async def write(self, source: Position, data: bytes) -> None:
        """Copy one entry (`source` is where it lives now; sources come in log order)."""
        if self._finished:
            raise ManagedLedgerError("this rewrite is finished")
        group = self._group
        if group.handle is None:
            group.handle = await create_output(self._ml)
        entry_id = await group.handle.append(bytes(data))
        group.first_entry.setdefault(source.ledger_id, entry_id)
        group.survivors.setdefault(source.ledger_id, []).append(source.entry_id)
        group.entries += 1
        group.size += len(data)

    async def end_run(self, old_ids: list[int]) -> None:
        """The entries written since the last end_run replace the ledgers `old_ids` (a run
        of consecutive listed ledgers, in log order)."""
        if not old_ids:
            raise ValueError("a run needs at least one ledger")
        group = self._group
        unknown = set(group.survivors) - set(old_ids)
        if unknown:
            raise ValueError(f"entries written from ledgers {sorted(unknown)} outside the run")
        if group.handle is not None:
            await group.handle.close()
        # A ledger none of whose entries survived maps to where the next survivor went.
        upcoming = group.entries
        for old_id in reversed(old_ids):
            upcoming = group.first_entry.setdefault(old_id, upcoming)
        group.old_ids = list(old_ids)
        self._done.append(group)
        self._group = _Group()

    async def commit(self) -> list[int]:
        """Swap every finished run for its output in one CAS; delete the old ledgers after.
        Returns the ids that were swapped out. RewriteConflictError if the list moved on."""
        if self._group.handle is not None:
            raise ManagedLedgerError("end_run() the last run before commit()")
        self._finished = True
        if not self._done:
            return []
        crash_point("managed_ledger.rewrite.before_swap")
        try:
            swapped = await swap_runs(
                self._ml,
                [
                    (g.old_ids, g.handle.ledger_id if g.handle else None, g.entries, g.size,
                     g.first_entry, g.survivors)
                    for g in self._done
                ]
            )
        except RewriteConflictError:
            await self._delete_outputs()
            raise
        crash_point("managed_ledger.rewrite.after_swap")
        await collect_garbage(self._ml, include_pending=False)
        return swapped

    async def abort(self) -> None:
        """Drop the outputs (the list never named them); safe to call after a failure."""
        if self._group.handle is not None:
            try:
                await self._group.handle.close()
            except LedgerError:
                pass
            self._done.append(self._group)
            self._group = _Group()
        self._finished = True
        await self._delete_outputs()

    async def _delete_outputs(self) -> None:
        outputs = [g.handle.ledger_id for g in self._done if g.handle is not None]
        self._done = []
        if outputs:
            await drop_pending(self._ml, outputs)


def replacement_record(
    old: list[LedgerRecord], new_ledger_id: int, entries: int, size: int
) -> LedgerRecord:
    """The list record of a run's output: closed, in the run's place in log order."""
    low = min(r.order_key for r in old)
    high = max(max(r.ledger_id, r.replaced[1] if r.replaced else r.ledger_id) for r in old)
    return LedgerRecord(
        new_ledger_id, entries, size, old[0].created_ms, closed=True, replaced=(low, high)
    )


# The steps below act on the managed ledger's private state: this module is its friend, the
# one place that changes `_pending` and `_garbage` and swaps runs of `_records`.

_Run = tuple[list[int], "int | None", int, int, dict[int, int], dict[int, list[int]]]


async def create_output(ml: ManagedLedger) -> WriteHandleLike:
    """Create an output ledger and record it as pending (step 1) before anything is written."""
    config = ml.config
    handle: WriteHandleLike = await ml._bk.create_ledger(
        config.ensemble_size,
        config.write_quorum,
        config.ack_quorum,
        {"managed-ledger": ml.name.encode("utf-8"), "rewrite": b"1"},
    )
    try:
        async with ml._meta_lock:
            ml._check_writable()
            pending = [*ml._pending, handle.ledger_id]
            await ml._write_metadata(list(ml._records), pending=pending)
    except BaseException:
        await ml._delete_ledger_quietly(handle.ledger_id)  # surely not listed anywhere
        raise
    crash_point("managed_ledger.rewrite.after_pending")
    return handle


async def swap_runs(ml: ManagedLedger, runs: list[_Run]) -> list[int]:
    """Step 3: one CAS replacing each run by its output; returns the swapped-out ids."""
    async with ml._meta_lock:
        ml._check_writable()
        records = list(ml._records)
        current_id = ml.current_ledger_id
        relocations: dict[int, Relocation] = {}
        swapped: list[int] = []
        outputs: list[int] = []
        empty_outputs: list[int] = []
        for old_ids, new_id, entries, size, first_entry, survivors in runs:
            ids = [r.ledger_id for r in records]
            if old_ids[0] not in ids:
                raise RewriteConflictError(f"{ml.name!r}: ledger {old_ids[0]} is not listed")
            start = ids.index(old_ids[0])
            old = records[start : start + len(old_ids)]
            if [r.ledger_id for r in old] != old_ids:
                raise RewriteConflictError(
                    f"{ml.name!r}: ledgers {old_ids} are not a listed run"
                )
            if any(not r.closed or r.ledger_id == current_id for r in old):
                raise RewriteConflictError(f"{ml.name!r}: ledgers {old_ids} are not all closed")
            replacement: list[LedgerRecord] = []
            if new_id is not None and entries > 0:
                replacement = [replacement_record(old, new_id, entries, size)]
                outputs.append(new_id)
            elif new_id is not None:
                empty_outputs.append(new_id)
            records[start : start + len(old_ids)] = replacement
            target = new_id if replacement else None
            for record in old:
                relocations[record.ledger_id] = Relocation(
                    target,
                    first_entry.get(record.ledger_id, 0),
                    tuple(survivors.get(record.ledger_id, ())),
                    record.order_key,
                )
            swapped.extend(old_ids)
        placed = set(outputs) | set(empty_outputs)
        pending = [p for p in ml._pending if p not in placed]
        garbage = [*ml._garbage, *swapped, *empty_outputs]
        unlisted = [r.offload for r in ml._records
                    if r.ledger_id in set(swapped) and r.offload is not None]
        await ml._write_metadata(records, pending=pending, garbage=garbage)
        ml._records = records
        ml._relocations.update(relocations)
        ml._cache.drop_ledgers(set(swapped))
    # offloaded copies of swapped-out ledgers (a crash right here leaves them behind)
    await ml._delete_objects(unlisted)
    log.info("managed ledger %r: ledgers %s rewritten into %s", ml.name, swapped, outputs)
    ml._notify_entries()
    return swapped


async def collect_garbage(ml: ManagedLedger, *, include_pending: bool) -> None:
    """Steps 4 and 5: delete what a swap unlisted (and, at open, what a dead rewrite left
    pending), then take the ids off the node."""
    doomed = [*ml._garbage, *(ml._pending if include_pending else [])]
    if not doomed:
        return
    for ledger_id in doomed:
        await ml._readers.forget(ledger_id)
        await ml._delete_ledger_quietly(ledger_id)
    crash_point("managed_ledger.rewrite.after_delete")
    gone = set(doomed)
    async with ml._meta_lock:
        ml._check_writable()
        await ml._write_metadata(
            list(ml._records),
            pending=[p for p in ml._pending if p not in gone],
            garbage=[g for g in ml._garbage if g not in gone],
        )


async def drop_pending(ml: ManagedLedger, outputs: list[int]) -> None:
    """Delete outputs of an abandoned rewrite and take them off "pending"."""
    for ledger_id in outputs:
        await ml._delete_ledger_quietly(ledger_id)
    gone = set(outputs)
    async with ml._meta_lock:
        if ml.is_fenced or ml.is_closed:
            return  # the next owner's open deletes what is still pending
        await ml._write_metadata(
            list(ml._records), pending=[p for p in ml._pending if p not in gone]
        )


def relocate(ml: ManagedLedger, position: Position) -> Position | None:
    """Where a reader at `position`, in a ledger that is not listed, continues (see the
    module docstring); InvalidPositionError (from the log reader) if it was trimmed."""
    seen = 0
    while True:
        records = ml._records
        listed = {r.ledger_id for r in records}
        if position.ledger_id in listed:
            return position
        moved = ml._relocations.get(position.ledger_id)
        if moved is not None and seen < 64:
            seen += 1
            target = moved.position_for(position.entry_id)
            if target is not None:
                position = target
                continue
            return _first_after(records, moved.order_key)
        for record in records:
            if record.replaced is not None and (
                record.replaced[0] <= position.ledger_id <= record.replaced[1]
            ):
                return Position(record.ledger_id, 0)  # after a restart: re-read the rewrite
        return ml._log_reader._next_by_order(position)


def _first_after(records: list[LedgerRecord], order_key: int) -> Position | None:
    for record in records:
        if record.order_key > order_key:
            return Position(record.ledger_id, 0)
    return None
