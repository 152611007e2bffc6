"""Offloading closed ledgers of a managed ledger to tiered storage, and dropping their
bookie copies later. The steps for one ledger, in this order, each with a crash point:

  1. the ledger's entries are read from the bookies and encoded (offload/object_format.py;
     a driver that stages objects, the filesystem's, gets each piece written to a temporary
     file as it is read -- nothing is under the key yet), and a FRESH key (ledger id +
     random suffix) is added to the node's "offload_pending" list by CAS before anything
     is stored under it                       -- managed_ledger.offload.after_intent
  2. the object is put under that key, atomically (a driver that stores a group at once,
     the filesystem's, puts the whole group: every file written, then fsynced and renamed)
                                              -- managed_ledger.offload.after_put
  3. it is read back whole and compared byte for byte with what was encoded
                                              -- managed_ledger.offload.after_verify
  4. ONE compare-and-set of the managed ledger's node records the object's location in the
     ledger's record ("offload", metadata_format.py version 3) and takes the key off
     "offload_pending"
                                              -- managed_ledger.offload.after_record
Later, once `deletion_lag_s` has passed since the verification:
  5. the bookie copy is deleted               -- managed_ledger.offload.after_bookie_delete
  6. a CAS marks the record "bookie_deleted".

So the list never names an object that was not completely written and verified: a crash
before 4 leaves the old record and a pending key, whose object (if any) the next owner
deletes when it opens the managed ledger (`sweep_pending_uploads`);
a crash between 5 and 6 leaves a record whose bookie copy is gone but whose object serves
every read (step 5 is simply redone). Several ledgers go as a pipeline (`offload_ledgers`):
ledgers are read from the bookies (each in pieces read at the same time) and encoded ahead,
while the ones already encoded go through steps 1-4 as a GROUP: one CAS writes the intents of
all of them, their objects are put and verified at the same time, and one CAS records every
one of them (each ledger's record is still complete or absent). Only CLOSED ledgers that
are not the current one are offloaded, oldest first; which of them a policy says are due is
offload_policy.py's. What the steps ask of the drivers and the upload check live in
offload_uploads.py. This module is the managed ledger's friend
(like ledger_swap.py): it changes `_records` only under `_meta_lock` and through
`_write_metadata`.

A pending key whose object goes elsewhere than the configured store (a namespace's own
directory or bucket: `offload(to=...)`) carries that place ("offload_pending_at"), so the
sweep deletes the object where it went.

Trimming, deleting the managed ledger and a compaction that swaps an offloaded ledger out
delete its object after the list has lost it. Not yet: an object orphaned by a crash
between such an unlisting and the object's deletion is not swept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import trio

from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.managed_ledger.metadata_format import LedgerRecord, OffloadRecord, encode_name
from ledger_backend.managed_ledger.offload_uploads import (
    PutsGroups,
    Staged,
    Stages,
    _discard_all,
    _first_error_of,
    _verify,
)
from ledger_backend.managed_ledger.types import ManagedLedgerError
from ledger_backend.offload.object_format import (
    EncodedObject,
    ObjectEncoder,
    encode_object_parts,
)
from ledger_backend.offload.offloader import Offloader, at_recorded

log = logging.getLogger(__name__)

OFFLOAD_CRASH_POINTS = (
    "managed_ledger.offload.after_intent",
    "managed_ledger.offload.after_put",
    "managed_ledger.offload.after_verify",
    "managed_ledger.offload.after_record",
    "managed_ledger.offload.after_bookie_delete",
)

# A ledger is read from the bookies in pieces of about _PIECE_BYTES, up to _PIECES_IN_FLIGHT
# at a time (each piece is batch reads of its own: client/batch_reads.py), so the bookie's
# reads, the wire and the client's digest checks overlap instead of taking turns.
_PIECE_BYTES = 2 << 20
_PIECES_IN_FLIGHT = 4
# ledgers read at the same time (each in pieces as above), handed on in ledger order
_LEDGERS_IN_FLIGHT = 2
# Steps 1-4 go for up to _GROUP_LEDGERS encoded ledgers (_GROUP_BYTES of objects) at once:
# two metadata writes and concurrent uploads per group instead of two writes per ledger. At
# most _PIPELINE_BYTES of ledgers are read ahead and not stored yet.
_GROUP_LEDGERS = 8
_GROUP_BYTES = 64 << 20
# objects of a group put and verified at the same time
_UPLOADS_IN_FLIGHT = 4
# bookie bytes of the ledgers read ahead and not stored yet (two ledgers always may be)
_PIPELINE_BYTES = 128 << 20


class ManagedLedger(Protocol):
    """What this friend module uses of managed_ledger.ManagedLedger."""

    name: str
    _meta_lock: trio.Lock
    _records: list[LedgerRecord]
    _offload_pending: list[str]
    _offload_pending_at: dict[str, dict[str, str]]
    _readers: Any  # LedgerReaders
    offloader: Offloader | None

    @property
    def is_fenced(self) -> bool: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def current_ledger_id(self) -> int: ...

    def _check_writable(self) -> None: ...

    def _clock_ms(self) -> int: ...

    async def _write_metadata(
        self, records: list[LedgerRecord], *, offload_pending: list[str] | None = None,
        offload_places: dict[str, dict[str, str]] | None = None,
    ) -> None: ...

    async def _delete_ledger_quietly(self, ledger_id: int) -> None: ...


class OffloadConflictError(ManagedLedgerError):
    """The ledger changed under the offload (trimmed, rewritten, offloaded meanwhile)."""


@dataclasses.dataclass(frozen=True)
class _Encoded:
    """Step 1's read and encode of one ledger, nothing recorded yet."""

    record: LedgerRecord
    data: EncodedObject  # its parts: the entries read, not copies (none when staged)
    staged: Staged | None = None  # written already, to be committed (Stages drivers)


async def offload_ledgers(ml: ManagedLedger, offloader: Offloader, ledger_ids: list[int]
                          ) -> list[int]:  # fmt: skip
    """Steps 1-4 for each closed ledger, in order, as a pipeline: ledgers are read from the
    bookies and encoded ahead while the ones encoded already are stored as a group (see the
    module docstring). The first error stops it and is raised (what was recorded stays)."""
    done: list[int] = []
    send, receive = trio.open_memory_channel[_Encoded | OffloadRecord | Exception](math.inf)
    error: Exception | None = None
    budget = _Budget(_PIPELINE_BYTES)
    staged: list[Staged] = []  # every staged object, discarded at the end unless committed

    async def read_ahead() -> None:
        # Up to _LEDGERS_IN_FLIGHT ledgers are read at the same time (started in order, within
        # the budget) and handed on in order: the next ledger's reads fill the gaps of this
        # one's (its last pieces, its encode) instead of starting after them.
        finished = [trio.Event() for _ in ledger_ids]
        results: dict[int, _Encoded | OffloadRecord | Exception] = {}
        slots = trio.Semaphore(_LEDGERS_IN_FLIGHT)

        async def read_one(index: int, ledger_id: int, size: int) -> None:
            try:
                item: _Encoded | OffloadRecord | Exception = await _read_and_encode(
                    ml, ledger_id, offloader)  # fmt: skip
                if isinstance(item, _Encoded) and item.staged is not None:
                    staged.append(item.staged)
            except Exception as exc:  # noqa: BLE001 - raised by the consumer, in order
                item = exc
            slots.release()
            if not isinstance(item, _Encoded):
                budget.give(size, 1)
            results[index] = item
            finished[index].set()

        async def start_reads() -> None:
            for index, ledger_id in enumerate(ledger_ids):
                size = _listed(ml, ledger_id).size if _is_listed(ml, ledger_id) else 0
                await budget.take(size)
                await slots.acquire()
                readers.start_soon(read_one, index, ledger_id, size)

        async with send, trio.open_nursery() as readers:
            readers.start_soon(start_reads)
            for index in range(len(ledger_ids)):
                await finished[index].wait()
                item = results.pop(index)
                send.send_nowait(item)
                if isinstance(item, Exception):
                    readers.cancel_scope.cancel()
                    return

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_ahead)
            try:
                async with receive:
                    while len(done) < len(ledger_ids):
                        group = [await receive.receive()]
                        while _room_in(group):
                            try:
                                group.append(receive.receive_nowait())
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                        encoded = [i for i in group if isinstance(i, _Encoded)]
                        if encoded:
                            await _store_group(ml, offloader, encoded)
                            budget.give(sum(e.record.size for e in encoded), len(encoded))
                        for item, ledger_id in zip(group, ledger_ids[len(done):], strict=False):
                            if isinstance(item, Exception):
                                raise item
                            done.append(ledger_id)
            except Exception as exc:  # raised plainly below, not inside an ExceptionGroup
                error = exc
                nursery.cancel_scope.cancel()
    finally:  # staged objects not committed (an error, a cancel) leave no file behind
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_discard_all, staged)
    if error is not None:
        raise error
    return done


class _Budget:
    """What the read-ahead may hold: always two ledgers (one stored, one read), more while
    their bookie sizes stay within `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._bytes = self._count = 0
        self._changed = trio.Event()

    async def take(self, size: int) -> None:
        while self._count >= 2 and self._bytes + size > self._limit:
            await self._changed.wait()
        self._bytes += size
        self._count += 1

    def give(self, size: int, count: int) -> None:
        self._bytes -= size
        self._count -= count
        self._changed.set()
        self._changed = trio.Event()


def _room_in(group: list[_Encoded | OffloadRecord | Exception]) -> bool:
    """Whether one more ready ledger may join the group (never after an error)."""
    if isinstance(group[-1], Exception) or len(group) >= _GROUP_LEDGERS:
        return False
    return sum(i.data.size for i in group if isinstance(i, _Encoded)) < _GROUP_BYTES


def _new_key(ml: ManagedLedger, ledger_id: int) -> str:
    """A fresh object key for one offload of the ledger (never reused: a retry gets another)."""
    return f"{encode_name(ml.name)}/{ledger_id}-{uuid.uuid4().hex[:12]}.lwo"


async def _read_and_encode(ml: ManagedLedger, ledger_id: int, offloader: Offloader | None = None
                           ) -> _Encoded | OffloadRecord:  # fmt: skip
    """Step 1 (without the intent): the ledger's entries from the bookies (in pieces read at
    the same time), encoded; or the ledger's offload record if it has one already. With a
    driver that stages objects (`Stages`) each piece is encoded and written as soon as the
    pieces before it are (the object's disk writes overlap the reads; nothing is under its
    key until the group's commit), else the object is kept as parts in memory."""
    record = _listed(ml, ledger_id)
    if not record.closed or record.ledger_id == ml.current_ledger_id:
        raise OffloadConflictError(f"{ml.name!r}: ledger {ledger_id} is still open")
    if record.offload is not None:
        return record.offload
    per_piece = max(1, _PIECE_BYTES * record.entries // max(1, record.size))
    firsts = list(range(0, record.entries, per_piece))
    pieces: list[list[bytes]] = [[] for _ in firsts]
    read = [trio.Event() for _ in firsts]
    limiter = trio.CapacityLimiter(_PIECES_IN_FLIGHT)

    async def read_piece(index: int) -> None:
        async with limiter:
            first = firsts[index]
            last = min(record.entries, first + per_piece) - 1
            pieces[index] = await ml._readers.read(ledger_id, first, last)
            read[index].set()

    reads: list[Callable[[], Awaitable[None]]] = [
        partial(read_piece, i) for i in range(len(firsts))]  # fmt: skip
    if not isinstance(offloader, Stages):
        await _first_error_of(reads)
        entries = [entry for piece in pieces for entry in piece]
        data = await trio.to_thread.run_sync(encode_object_parts, ledger_id, entries)
        return _Encoded(record, data)
    staged: Staged = offloader.stage(_new_key(ml, ledger_id))
    encoder = ObjectEncoder(ledger_id)

    async def write_in_order() -> None:
        for index in range(len(firsts)):
            await read[index].wait()
            entries, pieces[index] = pieces[index], []
            await trio.to_thread.run_sync(_encode_into, staged, encoder, entries)
        await trio.to_thread.run_sync(lambda: staged.write(encoder.finish()))

    try:
        await _first_error_of([*reads, write_in_order])
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(staged.discard)
        raise
    return _Encoded(record, EncodedObject((), encoder.size, encoder.crc), staged)


def _encode_into(staged: Staged, encoder: ObjectEncoder, entries: list[bytes]) -> None:
    staged.write(encoder.add(entries))


async def _store_group(ml: ManagedLedger, offloader: Offloader, group: list[_Encoded]) -> None:
    """Steps 1 (the intents) to 4 for encoded ledgers, in ledger order: one CAS for all the
    intents, the objects put and verified at the same time, one CAS recording them all. A
    ledger that changed meanwhile is not recorded (nor any after it): its upload and the
    later ones are dropped and OffloadConflictError raised after the earlier are recorded."""
    keys = [e.staged.key if e.staged is not None else _new_key(ml, e.record.ledger_id)
            for e in group]  # fmt: skip
    place = offloader.location_fields  # recorded unless it is the configured store's own
    own = ml.offloader is not None and place == ml.offloader.location_fields
    async with ml._meta_lock:
        ml._check_writable()
        await ml._write_metadata(list(ml._records), offload_pending=[*ml._offload_pending, *keys],
                                 offload_places=None if own else {k: dict(place) for k in keys})
    crash_point("managed_ledger.offload.after_intent")

    uploads = trio.CapacityLimiter(_UPLOADS_IN_FLIGHT)
    staged = [e.staged for e in group if e.staged is not None]
    put_at_once = bool(staged) or isinstance(offloader, PutsGroups)

    async def put_and_verify(key: str, data: EncodedObject) -> None:
        async with uploads:
            if not put_at_once:
                await offloader.put(key, data.parts)
                crash_point("managed_ledger.offload.after_put")
            await _verify(offloader, key, data)

    try:
        if staged:  # written while read: stored now, all at once
            assert isinstance(offloader, Stages) and len(staged) == len(group)
            await offloader.commit_group(staged)
            crash_point("managed_ledger.offload.after_put")
        elif put_at_once:
            assert isinstance(offloader, PutsGroups)
            await offloader.put_group([(k, e.data.parts) for k, e in zip(keys, group, strict=True)])
            crash_point("managed_ledger.offload.after_put")
        await _first_error_of(
            [partial(put_and_verify, k, e.data) for k, e in zip(keys, group, strict=True)])
    except BaseException:
        await _drop_uploads(ml, offloader, keys)
        raise
    crash_point("managed_ledger.offload.after_verify")
    recorded: list[tuple[int, str, int]] = []
    conflict: OffloadConflictError | None = None
    try:
        async with ml._meta_lock:
            ml._check_writable()
            records = list(ml._records)
            for key, encoded in zip(keys, group, strict=True):
                ledger_id = encoded.record.ledger_id
                try:
                    now = _listed(ml, ledger_id)
                    if now.offload is not None or now.entries != encoded.record.entries:
                        raise OffloadConflictError(
                            f"{ml.name!r}: ledger {ledger_id} changed meanwhile")
                except OffloadConflictError as exc:
                    conflict = exc
                    break
                location = OffloadRecord(
                    offloader.driver, key, encoded.data.size, encoded.data.crc, ml._clock_ms(),
                    location=tuple(sorted(offloader.location_fields.items())))
                updated = dataclasses.replace(now, offload=location)
                records = [updated if r is now else r for r in records]
                recorded.append((ledger_id, key, encoded.data.size))
            if recorded:
                taken = {key for _, key, _ in recorded}
                still_pending = [k for k in ml._offload_pending if k not in taken]
                await ml._write_metadata(records, offload_pending=still_pending)
                ml._records[:] = records
    except BaseException:  # nothing of the group was recorded
        await _drop_uploads(ml, offloader, keys)
        raise
    crash_point("managed_ledger.offload.after_record")
    for ledger_id, key, size in recorded:
        log.info("managed ledger %r: ledger %d offloaded to %s %r (%d bytes)",
                 ml.name, ledger_id, offloader.driver, key, size)
    if conflict is not None:
        await _drop_uploads(ml, offloader, keys[len(recorded):])
        raise conflict


async def delete_bookie_copies(ml: ManagedLedger, deletion_lag_s: float) -> list[int]:
    """Steps 5-6 for every offloaded ledger verified at least `deletion_lag_s` ago."""
    cutoff = ml._clock_ms() - int(deletion_lag_s * 1000)
    due = [
        r.ledger_id
        for r in ml._records
        if r.offload is not None
        and not r.offload.bookie_deleted
        and r.offload.verified_ms <= cutoff
    ]
    done: list[int] = []
    for ledger_id in due:
        await ml._readers.forget(ledger_id)
        await ml._delete_ledger_quietly(ledger_id)
        crash_point("managed_ledger.offload.after_bookie_delete")
        async with ml._meta_lock:
            ml._check_writable()
            try:
                now = _listed(ml, ledger_id)
            except OffloadConflictError:
                continue
            assert now.offload is not None
            updated = dataclasses.replace(
                now, offload=dataclasses.replace(now.offload, bookie_deleted=True)
            )
            records = [updated if r is now else r for r in ml._records]
            await ml._write_metadata(records)
            ml._records[:] = records
        done.append(ledger_id)
    if done:
        log.info("managed ledger %r: bookie copies of offloaded ledgers %s deleted", ml.name, done)
    return done


def _is_listed(ml: ManagedLedger, ledger_id: int) -> bool:
    return any(r.ledger_id == ledger_id for r in ml._records)


def _listed(ml: ManagedLedger, ledger_id: int) -> LedgerRecord:
    for record in ml._records:
        if record.ledger_id == ledger_id:
            return record
    raise OffloadConflictError(f"{ml.name!r}: ledger {ledger_id} is not listed")


async def sweep_pending_uploads(ml: ManagedLedger) -> None:
    """At open: delete the objects of offloads that died before being recorded (step 1's
    "offload_pending" keys) and take the keys off the node."""
    keys = list(ml._offload_pending)
    if not keys:
        return
    if ml.offloader is None:
        log.warning("%r: objects of unfinished offloads %s left behind: no offloader is "
                    "configured", ml.name, keys)
        return
    for key in keys:
        place = tuple(sorted(ml._offload_pending_at.get(key, {}).items()))
        await _delete_object_quietly(at_recorded(ml.offloader, place), key)
    async with ml._meta_lock:
        ml._check_writable()
        await ml._write_metadata(
            list(ml._records), offload_pending=[k for k in ml._offload_pending if k not in keys]
        )
    log.info("%r: deleted the objects of unfinished offloads %s", ml.name, keys)


async def _drop_uploads(ml: ManagedLedger, offloader: Offloader, keys: list[str]) -> None:
    """Offloads failed before being recorded: delete their objects, then their pending keys."""
    for key in keys:
        await _delete_object_quietly(offloader, key)
    with trio.CancelScope(shield=True):
        async with ml._meta_lock:
            mine = [k for k in keys if k in ml._offload_pending]
            if ml.is_fenced or ml.is_closed or not mine:
                return  # the next owner's open sweeps them
            try:
                await ml._write_metadata(
                    list(ml._records),
                    offload_pending=[k for k in ml._offload_pending if k not in mine],
                )
            except Exception as exc:  # the next open sweeps them
                log.warning("%r: could not clear pending uploads %s: %r", ml.name, mine, exc)


async def _delete_object_quietly(offloader: Offloader, key: str) -> None:
    with trio.CancelScope(shield=True):
        try:
            await offloader.delete(key)
        except Exception as exc:  # best effort: an unreferenced object harms no reader
            log.warning("could not delete unreferenced object %r: %r", key, exc)
