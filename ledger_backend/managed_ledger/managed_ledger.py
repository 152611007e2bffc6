"""A managed ledger: one partition's log as a chain of ledgers, written by ONE owner.

Rules this module keeps (and must never break):

- One writer. Only the instance that opened the managed ledger writes it; opening fenced
  the previous owner (see factory.py). A fenced add or a BadVersionError on the metadata node
  means someone else owns it now: the instance turns FENCED and fails loudly from then on. It
  never overwrites metadata it did not read last (every update is a CAS on the node version).
- Appends get call-order positions: the position is taken synchronously before the first
  await (the WriteHandle assigns entry ids the same way), so concurrent appends are pipelined.
  An append returns once its entry and every earlier append are acknowledged.
- Rollover (by entry count, bytes or age, checked before an append) is: create the new ledger,
  CAS-append it to the list, switch; the old ledger is closed once the appends already sent
  to it complete there. Appends arriving during rollover queue in call order.
- Trimming removes whole ledgers from the front, CAS-removing them from the list BEFORE
  deleting them, and never deletes the current ledger.
- Reads never go beyond last_confirmed.
- Log order is list order (ledger ORDER KEYS), not raw ledger ids: a rewrite (ledger_swap.py,
  the friend module that swaps runs of closed ledgers for their compacted copies) puts newer
  ids in older places. Compare positions with `position_key`, never as plain tuples.

Where things live: this module holds the managed ledger's state, metadata writes, reads,
tiered storage, cursors and close; the appends (append, append_soon and their shared steps)
are in ledger_appends.py, rollover and the finishing of retired ledgers (`WriteLedger` among
them) in ledger_finishing.py, trimming in ledger_trimming.py (all bound as ManagedLedger's
methods).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections import deque
from collections.abc import Callable

import trio

from ledger_backend.client.errors import (
    LedgerError,
    NoSuchLedgerError,
)
from ledger_backend.managed_ledger import ledger_appends, ledger_finishing, ledger_trimming
from ledger_backend.managed_ledger.client_protocol import BookKeeperLike, WriteHandleLike
from ledger_backend.managed_ledger.cursor import Cursor, create_cursor, load_cursor
from ledger_backend.managed_ledger.entry_reader import LedgerReaders
from ledger_backend.managed_ledger.ledger_finishing import WriteLedger
from ledger_backend.managed_ledger.ledger_swap import LedgerRewrite, Relocation, relocate
from ledger_backend.managed_ledger.log_reader import LogReader
from ledger_backend.managed_ledger.metadata_format import (
    LedgerRecord,
    ManagedLedgerNode,
    encode_managed_ledger,
    encode_name,
)
from ledger_backend.managed_ledger.offload_policy import offload_candidates
from ledger_backend.managed_ledger.offloading import delete_bookie_copies, offload_ledgers
from ledger_backend.managed_ledger.tail_cache import TailCache
from ledger_backend.managed_ledger.types import (
    CursorConflictError,
    Entry,
    InvalidPositionError,
    LedgerInfo,
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    Position,
)
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from ledger_backend.offload.object_reader import OffloadedReader
from ledger_backend.offload.offloader import Offloader

log = logging.getLogger(__name__)

# kill -9 points of the one-transaction close (tests/managed_ledger/test_close_crash.py)
CLOSE_CRASH_POINTS = ("managed_ledger.close.before_record", "managed_ledger.close.after_record")


class ManagedLedger:
    """Created by ManagedLedgerFactory.open(); see the module docstring for the rules."""

    def __init__(
        self,
        *,
        name: str,
        config: ManagedLedgerConfig,
        store: MetadataStore,
        bk: BookKeeperLike,
        path: str,
        cursors_path: str,
        node: ManagedLedgerNode,
        version: int,
        current_handle: WriteHandleLike,
        readers: LedgerReaders,
        cursors: dict[str, Cursor],
        clock: Callable[[], float],
        on_close: Callable[[ManagedLedger], None],
        offloader: Offloader | None = None,
        offloaded_reader: OffloadedReader | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.cursors = cursors
        self.created_with = False  # the factory's open created it with the caller's nodes
        self._store = store
        self._bk = bk
        self._path = path
        self._cursors_path = cursors_path
        self._created_ms = node.created_ms
        self._records: list[LedgerRecord] = node.ledgers
        self._pending: list[int] = list(node.pending)  # rewrite outputs not listed yet
        self._garbage: list[int] = list(node.garbage)  # unlisted by a swap, to delete
        self._offload_pending: list[str] = list(node.offload_pending)  # uploads not recorded
        self._offload_pending_at = dict(node.offload_pending_at)  # ...and where they went
        self._relocations: dict[int, Relocation] = {}  # swapped-out ledger -> its survivors
        self._version = version
        self._readers = readers
        self._clock = clock
        self._on_close = on_close
        if not self._records or self._records[-1].ledger_id != current_handle.ledger_id:
            raise ValueError("the current ledger must be the last record")
        self._current = WriteLedger(current_handle, self._records[-1], previous=None)
        self._unfinished: set[WriteLedger] = {self._current}
        self._meta_lock = trio.Lock()
        self._waiters: deque[trio.Event] = deque()
        self._entries_changed = trio.Event()  # replaced when set: only while waited on
        self._entries_waiters = 0
        # The cache and the reader are this ledger's own and call back into it through a weak
        # proxy: no reference cycle, so a closed ledger is freed as soon as its log lets go of
        # it, not left (with everything it holds) for a full run of the cycle collector.
        me = weakref.proxy(self)
        self._cache = TailCache(config.tail_cache_bytes, lambda p: me._evictable(p))
        self.offloader = offloader
        self._offloaded_reader = offloaded_reader or OffloadedReader(
            {offloader.driver: offloader} if offloader is not None else {}
        )
        self._log_reader = LogReader(
            name, lambda: me._records, self._cache, readers, lambda p: relocate(me, p),
            self._offloaded_reader,
        )
        self._fenced_reason: str | None = None
        self._closed = False
        self._close_done = trio.Event()  # set when close() has finished

    # ----------------------------------------------------------------- state

    @property
    def is_fenced(self) -> bool:
        return self._fenced_reason is not None

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def metadata_version(self) -> int:
        return self._version

    @property
    def current_ledger_id(self) -> int:
        return self._current.record.ledger_id

    @property
    def ledgers(self) -> list[LedgerInfo]:
        current = self._current.record
        return [
            LedgerInfo(
                r.ledger_id, r.entries, r.size, r.created_ms, r.closed and r is not current,
                offloaded=r.offload is not None,
                on_bookies=r.offload is None or not r.offload.bookie_deleted,
            )
            for r in self._records
        ]

    @property
    def last_confirmed(self) -> Position | None:
        for record in reversed(self._records):
            if record.entries > 0:
                return Position(record.ledger_id, record.entries - 1)
        return None

    @property
    def first_position(self) -> Position | None:
        for record in self._records:
            if record.entries > 0:
                return Position(record.ledger_id, 0)
        return None

    @property
    def total_size(self) -> int:
        return sum(r.size for r in self._records)

    @property
    def number_of_entries(self) -> int:
        return sum(r.entries for r in self._records)

    def _check_writable(self) -> None:
        if self._closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name!r} is closed")
        if self._fenced_reason is not None:
            raise ManagedLedgerFencedError(
                f"managed ledger {self.name!r} has another owner: {self._fenced_reason}"
            )

    def _become_fenced(self, reason: str) -> None:
        if self._fenced_reason is None:
            # expected when ownership moves or auto-recovery fences a ledger: not an error
            log.warning("managed ledger %r fenced: %s", self.name, reason)
            self._fenced_reason = reason
        for waiter in self._waiters:
            waiter.set()  # queued appends wake up and fail
        self._notify_entries()

    def _notify_entries(self) -> None:
        if self._entries_waiters:  # an append nobody waits for makes no Event
            event, self._entries_changed = self._entries_changed, trio.Event()
            event.set()

    # ----------------------------------------------------------------- append

    # appends and the steps they share (ledger_appends.py)
    append = ledger_appends.append
    _needs_rollover = ledger_appends._needs_rollover
    _append_queued = ledger_appends._append_queued
    _submit = ledger_appends._submit
    takes_append_soon = ledger_appends.takes_append_soon
    append_soon = ledger_appends.append_soon
    _submitting = ledger_appends._submitting
    _add_failed = ledger_appends._add_failed
    _added = ledger_appends._added

    # rollover and the finishing of retired ledgers (ledger_finishing.py)
    _finish_retired = ledger_finishing._finish_retired
    _roll_over = ledger_finishing._roll_over
    _finish_ledger = ledger_finishing._finish_ledger
    _close_and_record = ledger_finishing._close_and_record

    # ----------------------------------------------------------------- metadata

    def _node_bytes(self, records: list[LedgerRecord], pending: list[int],
                    garbage: list[int], uploads: list[str],
                    places: dict[str, dict[str, str]] | None = None) -> bytes:
        places = self._offload_pending_at if places is None else places
        return encode_managed_ledger(ManagedLedgerNode(
            self.name, self._created_ms, records, pending=pending, garbage=garbage,
            offload_pending=uploads,
            offload_pending_at={k: places[k] for k in uploads if k in places},
        ))

    async def _write_metadata(
        self,
        records: list[LedgerRecord],
        *,
        pending: list[int] | None = None,
        garbage: list[int] | None = None,
        offload_pending: list[str] | None = None,
        offload_places: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """CAS the node to `records` (and the rewrite and offload lists, unchanged unless
        given; `offload_places`: where new pending keys' objects go, when not the configured
        store); the caller holds _meta_lock. Never overwrites blindly."""
        new_pending = list(self._pending if pending is None else pending)
        new_garbage = list(self._garbage if garbage is None else garbage)
        new_uploads = list(self._offload_pending if offload_pending is None else offload_pending)
        places = {**self._offload_pending_at, **(offload_places or {})}
        new_places = {k: places[k] for k in new_uploads if k in places}
        node = self._node_bytes(records, new_pending, new_garbage, new_uploads, new_places)
        try:
            stat = await self._store.set(self._path, node, self._version)
        except (BadVersionError, NoNodeError) as exc:
            self._become_fenced(
                f"metadata node {self._path} changed under us (expected version {self._version})"
            )
            raise ManagedLedgerFencedError(
                f"managed ledger {self.name!r}: metadata node {self._path} was changed by "
                f"another owner (expected version {self._version}); not overwriting it"
            ) from exc
        self._version = stat.version
        self._pending, self._garbage = new_pending, new_garbage
        self._offload_pending, self._offload_pending_at = new_uploads, new_places

    async def _delete_ledger_quietly(self, ledger_id: int) -> None:
        try:
            await self._bk.delete_ledger(ledger_id)
        except NoSuchLedgerError:
            pass
        except LedgerError as exc:
            log.warning("could not delete ledger %d of %r: %r", ledger_id, self.name, exc)

    # ----------------------------------------------------------------- reads

    def _evictable(self, position: Position) -> bool:
        current = self._current
        if position.ledger_id != current.record.ledger_id:
            return all(w.record.ledger_id != position.ledger_id for w in self._unfinished)
        return position.entry_id <= current.durable_lac

    def position_key(self, position: Position) -> tuple[int, int]:
        """Sort key of a position in log order (positions of unlisted ledgers are relocated
        first; a trimmed one sorts before everything)."""
        for record in self._records:
            if record.ledger_id == position.ledger_id:
                return (record.order_key, position.entry_id)
        try:
            moved = relocate(self, position)
        except InvalidPositionError:
            return (-1, position.entry_id)
        if moved is None:
            return (1 << 62, 0)
        if moved.ledger_id == position.ledger_id:
            return (moved.ledger_id, moved.entry_id)
        key = self.position_key(moved)
        return (key[0], key[1] - 1)  # just before the entry it continues at

    def rewrite(self) -> LedgerRewrite:
        """Start rewriting closed ledgers (compaction); see ledger_swap.py for the steps."""
        self._check_writable()
        return LedgerRewrite(self)

    def next_position(self, position: Position) -> Position | None:
        """Position of the entry after `position` (which may not exist yet when `position` is
        in the last ledger); None if `position` lies beyond every ledger."""
        return self._log_reader.next_position(position)

    async def read(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """Up to max_entries entries from `start` on, crossing ledgers, never past
        last_confirmed; [] at the end. With max_bytes, stops before the entry that would
        exceed it, but always returns at least one entry if there is one.
        InvalidPositionError for a trimmed position."""
        return await self._log_reader.read(start, max_entries, max_bytes)

    async def read_entry(self, position: Position) -> bytes:
        """The entry at `position`; InvalidPositionError if there is none (yet)."""
        return await self._log_reader.read_entry(position)

    async def wait_for_entries(self, after: Position | None, timeout_s: float) -> bool:
        """Long poll: True once last_confirmed is past `after` (any entry, for None); False on
        timeout or when no more entries can come (closed, fenced)."""
        await trio.lowlevel.checkpoint()
        with trio.move_on_after(timeout_s if math.isfinite(timeout_s) else math.inf):
            while True:
                last = self.last_confirmed
                if last is not None and (
                    after is None or self.position_key(last) > self.position_key(after)
                ):
                    return True
                if self._closed or self._fenced_reason is not None:
                    return False
                self._entries_waiters += 1
                try:
                    await self._entries_changed.wait()
                finally:
                    self._entries_waiters -= 1
        return False

    # ----------------------------------------------------- trimming (ledger_trimming.py)

    trim = ledger_trimming.trim
    delete_ledgers_before = ledger_trimming.delete_ledgers_before
    _unlist_front_ledgers = ledger_trimming._unlist_front_ledgers
    _delete_unlisted = ledger_trimming._delete_unlisted
    _delete_objects = ledger_trimming._delete_objects

    # ----------------------------------------------------------------- tiered storage

    @property
    def offload_read_errors(self) -> int:
        """Failed reads of offloaded objects (shared by the factory's managed ledgers)."""
        return self._offloaded_reader.errors

    @property
    def offload_store_reads(self) -> tuple[int, float]:
        """(range requests to the object store, seconds spent in them), factory-wide."""
        return self._offloaded_reader.store_reads, self._offloaded_reader.store_read_seconds

    def _clock_ms(self) -> int:
        return int(self._clock() * 1000)

    async def offload(
        self, keep_bytes: int | None = None, older_than_s: float | None = None,
        *, to: Offloader | None = None,
    ) -> list[int]:
        """Offload closed ledgers (oldest first, never the current one): all of them, or
        those beyond `keep_bytes` on bookies or older than `older_than_s` (offloading.py's
        offload_candidates); returns the ids offloaded now. `to`: the configured driver at
        another location (a namespace's; each record says where its object went). See
        offloading.py for the steps and their crash safety."""
        self._check_writable()
        if self.offloader is None:
            raise ManagedLedgerError(f"{self.name!r}: no offloader is configured")
        chosen = [r.ledger_id for r in offload_candidates(self, keep_bytes, older_than_s)]
        return await offload_ledgers(self, to or self.offloader, chosen)

    async def delete_offloaded_bookie_copies(self, deletion_lag_s: float) -> list[int]:
        """Delete the bookie copies of ledgers offloaded at least `deletion_lag_s` ago."""
        self._check_writable()
        return await delete_bookie_copies(self, deletion_lag_s)

    # ----------------------------------------------------------------- cursors

    async def open_cursor(self, name: str) -> Cursor:
        """The durable cursor `name`, created (without a position) if it does not exist."""
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor
        path = f"{self._cursors_path}/{encode_name(name)}"
        try:
            cursor = await load_cursor(self._store, path)
        except NoNodeError:
            try:
                cursor = await create_cursor(self._store, path, name)
            except NodeExistsError:
                cursor = await load_cursor(self._store, path)
        self.cursors.setdefault(name, cursor)
        return self.cursors[name]

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        path = f"{self._cursors_path}/{encode_name(name)}"
        version = -1 if cursor is None else cursor.version
        try:
            await self._store.delete(path, version)
        except NoNodeError:
            pass
        except BadVersionError as exc:
            raise CursorConflictError(f"cursor {name!r} was changed by someone else") from exc
        if cursor is not None:
            cursor._mark_deleted()

    # ----------------------------------------------------------------- close

    async def close(self) -> None:
        """Stop appends, let in-flight ones finish, close the current ledger (CLOSED) and record
        it, so the next open needs no recovery. An empty current ledger is dropped. A second
        call returns when the first has finished (a bundle release meeting an idle unload)."""
        if self._closed:
            await self._close_done.wait()
            return
        self._closed = True
        for waiter in self._waiters:
            waiter.set()
        try:
            with trio.CancelScope(shield=True):
                # A rollover racing with close may add one more ledger: loop until none is left.
                while self._unfinished:
                    ledger = next(iter(self._unfinished))
                    ledger.retired = True
                    if ledger.in_flight == 0 and not ledger.finishing:
                        await self._finish_ledger(ledger)
                    else:
                        await ledger.drained.wait()
                current = self._current.record
                if current.closed and current.entries == 0:
                    await self._drop_empty_current(current)
        finally:
            try:
                self._notify_entries()
                await self._readers.close_all()
                self._cache.clear()
                self._on_close(self)
            finally:
                self._close_done.set()

    async def _drop_empty_current(self, record: LedgerRecord) -> None:
        async with self._meta_lock:
            if self._fenced_reason is not None:
                return
            remaining = [r for r in self._records if r is not record]
            try:
                await self._write_metadata(remaining)
            except (ManagedLedgerFencedError, MetadataError) as exc:
                log.warning(
                    "could not drop empty ledger %d of %r: %r", record.ledger_id, self.name, exc
                )
                return
            self._records = remaining
        await self._delete_ledger_quietly(record.ledger_id)

    def __repr__(self) -> str:
        return (
            f"ManagedLedger({self.name!r}, ledgers={[r.ledger_id for r in self._records]}, "
            f"last_confirmed={self.last_confirmed}, fenced={self.is_fenced}, "
            f"closed={self._closed})"
        )
