"""WriteHandle: the single writer of one OPEN ledger.

Adds are pipelined: `append` takes the next entry id synchronously (before its first await),
sends the entry to its write set (ensemble indexes (e + i) mod E, i < Qw) and returns once Qa
bookies acknowledged it AND every earlier entry is acknowledged. Each add carries the writer's
LAC; once adds pause for `explicit_lac_delay_s`, the writer sends its LAC to the bookies of the
last fragment (WRITE_LAC), so readers of the open ledger are not left one entry behind. When a
bookie fails or times out, an ensemble change starts a new fragment at the first
unacknowledged entry with a replacement bookie not already in the ensemble, CASes the metadata,
and resends outstanding entries to the replacement; completions are held meanwhile so the LAC
never passes the fragment boundary. A replacement is preferably a bookie that never failed this
writer; failing that, any registered bookie that answers a probe now, including one that failed
earlier (or the failed bookie itself) and came back. With no such bookie (no spare: E equals the
live bookies) the change waits and tries again until the oldest add's deadline, instead of
failing the ledger at once. A FENCED answer from any bookie, or a CAS that finds the
ledger no longer OPEN, fails the handle with LedgerFencedError (a deposed writer never gets
another add acknowledged). `close` CASes the metadata to CLOSED at the LAC.

This module must never acknowledge an entry that fewer than Qa bookies of its current write
set stored, and never write metadata without the version it read.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    Response,
    Status,
    WriteLacRequest,
)
from ledger_backend.client.client_context import ClientContext, MetadataVersionConflict
from ledger_backend.client.entry_format import encode_entry
from ledger_backend.client.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState

if TYPE_CHECKING:
    from ledger_backend.metadata.store import Op, OpResult

log = logging.getLogger(__name__)

# An append gives up (and fails the handle) after this many client timeouts: long enough for a
# bookie timeout, an ensemble change and the resend to happen one after the other.
_APPEND_TIMEOUTS = 4
# With no bookie to replace a failed one, the ensemble change tries again this often (until the
# oldest add's deadline), so an add resumes soon after a bookie returns or a spare registers.
_REPLACEMENT_RETRY_S = 0.5
# A probe of a bookie that failed this writer earlier gets at most this long to answer.
_PROBE_TIMEOUT_S = 1.0


@dataclass(eq=False, slots=True)
class _PendingAdd:
    entry_id: int
    ledger_length: int
    lac_sent: int
    body: bytes
    deadline: float  # the handle fails if this add is still unacknowledged then
    sent_to: dict[int, str] = field(default_factory=dict)  # ensemble index -> bookie address
    acked: set[int] = field(default_factory=set)
    finished: bool = False
    done: trio.Event | None = None  # made by append(), which waits; append_soon's adds do not
    error: LedgerError | None = None
    # append_soon's completion: called with the entry id and None, or the error, once done
    on_done: Callable[[int, LedgerError | None], None] | None = None

    def finish(self) -> None:
        """Done (acknowledged, or failed with `error`): wake append(), call on_done."""
        self.finished = True
        if self.done is not None:
            self.done.set()
        if self.on_done is not None:
            try:
                self.on_done(self.entry_id, self.error)
            except Exception:  # the handle's bookkeeping must go on for the adds after it
                log.exception("ledger add completion failed")


class WriteHandle:
    """Writer of one ledger. Create through BookKeeper.create_ledger."""

    def __init__(
        self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> None:
        self._ctx = ctx
        self.ledger_id = ledger_id
        self._metadata = metadata
        self._version = version
        self._master_key = ctx.master_key(metadata)  # sent with every add
        self._mac_key = ctx.mac_key(metadata)  # None: entries carry a CRC
        self._next_entry_id = 0
        self._lac = -1
        self._length = 0
        self._assigned_length = 0
        self._pending: deque[_PendingAdd] = deque()  # in entry-id order
        # made by a close that waits for adds in flight, set once none is left: an add makes
        # no Event of its own for it
        self._drained: trio.Event | None = None
        self._failed_bookies: dict[int, str] = {}
        # bookie -> when it last failed this writer: tried as a replacement only after the
        # never-failed ones, and only once a probe shows it answers again
        self._failed_at: dict[str, float] = {}
        self._changing_ensemble = False
        self._error: LedgerError | None = None
        self._closing = False
        self._closed = False
        self._close_lock = trio.Lock()
        self.ensemble_changes = 0
        self._watched = False  # registered with the client's deadline watchdog
        self._lac_told = -1  # the highest LAC the bookies heard (piggybacked or explicit)
        self._explicit_lac_pending = False

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def append(self, data: bytes) -> int:
        add = self._start_add(data, None)
        if add.finished:  # failed at once (a bookie refused it while it was sent)
            await trio.lowlevel.checkpoint()
        else:
            add.done = trio.Event()
            await add.done.wait()  # the watchdog fails the handle if it takes too long
        if add.error is not None:
            raise add.error
        return add.entry_id

    def append_soon(self, data: bytes, on_done: Callable[[int, LedgerError | None], None]
                    ) -> int:  # fmt: skip
        """append() without a waiting task: the entry id at once; `on_done(entry id, None)` once
        the ack quorum has it (every earlier entry too), or `on_done(entry id, error)` where
        append() would raise, in the Trio thread (possibly before this returns, when a bookie
        is refused at once).  Raises at once, starting nothing, when the handle takes no add."""
        return self._start_add(data, on_done).entry_id

    def _start_add(self, data: bytes,
                   on_done: Callable[[int, LedgerError | None], None] | None) -> _PendingAdd:
        self._check_writable()
        entry_id = self._next_entry_id  # synchronous: ids follow call order
        self._next_entry_id += 1
        self._assigned_length += len(data)
        body = encode_entry(self.ledger_id, entry_id, self._lac, self._assigned_length, data,
                            mac_key=self._mac_key)
        deadline = trio.current_time() + self._ctx.timeout_s * _APPEND_TIMEOUTS
        add = _PendingAdd(entry_id, self._assigned_length, self._lac, body, deadline,
                          on_done=on_done)
        self._lac_told = max(self._lac_told, self._lac)
        self._pending.append(add)
        self._send_missing(add)
        if not self._watched:
            self._watched = True
            self._ctx.timers.watch(self)
        return add

    async def close(self) -> None:
        """Wait (bounded) for in-flight adds, then CAS the ledger to CLOSED at the LAC.
        Idempotent. LedgerFencedError if another client fenced or recovered the ledger."""
        async with self._close_lock:  # a second caller waits for the first, then returns
            if self._closed:
                await trio.lowlevel.checkpoint()
                return
            await self._close_locked()

    async def close_together(self, store: object, ops: list[Op]) -> list[OpResult] | None:
        """close(), with `ops` (on `store`) committed in the same metadata transaction as the
        CLOSED state: one write where a managed ledger would make two.  The results of `ops`;
        None when they were not applied (`store` is not this client's, or the transaction was
        refused): the ledger was then closed as close() does, alone, or was already closed."""
        async with self._close_lock:
            if self._closed:
                await trio.lowlevel.checkpoint()
                return None
            return await self._close_locked(ops if store is self._ctx.store else None)

    async def _close_locked(self, together: list[Op] | None = None) -> list[OpResult] | None:
        self._closing = True
        if self._pending:  # (an idle handle's close registers no deadline)
            drained = self._drained = self._drained or trio.Event()
            with trio.move_on_after(self._ctx.timeout_s * _APPEND_TIMEOUTS):
                await drained.wait()
        if self._pending:
            self._fail(LedgerClosedError(f"ledger {self.ledger_id} closed with adds in flight"))
        if isinstance(self._error, LedgerFencedError):
            self._closed = True
            raise self._error
        closed = self._metadata.replace(
            state=LedgerState.CLOSED, last_entry_id=self._lac, length=self._length
        )
        if together:
            written = await self._ctx.cas_metadata_with(self.ledger_id, closed, self._version,
                                                        together)
            if written is not None:
                self._version, results = written
                self._metadata = closed
                self._closed_now()
                return results
            # refused (our version, or one of theirs): close alone, as close() does
        while True:
            try:
                self._version = await self._ctx.cas_metadata(self.ledger_id, closed, self._version)
                self._metadata = closed
                break
            except MetadataVersionConflict:
                current, self._version = await self._ctx.read_metadata(self.ledger_id)
                # Closed or in recovery by another client, even at our LAC: this writer was
                # deposed and must hear it (like MemoryWriteHandle).
                if current.state is not LedgerState.OPEN:
                    self._closed = True
                    self._fail(LedgerFencedError(f"ledger {self.ledger_id} was recovered by "
                                                 f"another client"))  # fmt: skip
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} is {current.state.value}, not closing it"
                    ) from None
                closed = current.replace(
                    state=LedgerState.CLOSED, last_entry_id=self._lac, length=self._length
                )
        self._closed_now()
        return None

    def _closed_now(self) -> None:
        self._closed = True
        if self._error is None:
            self._error = LedgerClosedError(f"ledger {self.ledger_id} is closed")
        self._unwatch()

    # --- the client's timers (handle_timers.py): one watchdog and one LAC sender for all
    # handles, instead of a task each per ledger

    def oldest_deadline(self) -> float | None:
        """When the oldest unacknowledged add fails the handle (deadlines follow entry order);
        None once nothing is in flight."""
        if not self._pending or self._error is not None or self._closed:
            self._watched = False
            return None
        return self._pending[0].deadline

    def deadline_passed(self) -> None:
        self._watched = False
        if self._pending:
            self._fail(BKTimeoutError(f"ledger {self.ledger_id} entry "
                                      f"{self._pending[0].entry_id} was not acknowledged in "
                                      f"time"))  # fmt: skip

    def _unwatch(self) -> None:
        """Leave the watchdog (drained, closed or failed): an acknowledged add's deadline is
        4 x timeout_s away, and it must not keep a closed handle (an unloaded partition's)
        in memory that long."""
        if self._watched:
            self._watched = False
            self._ctx.timers.unwatch(self)

    # --- sending and acknowledging --------------------------------------------------------

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing or self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} write handle is closed")

    def _send_missing(self, add: _PendingAdd) -> None:
        """Send `add` to every bookie of its write set it has not been sent to (skipping
        indexes whose bookie failed and awaits replacement)."""
        ensemble = self._metadata.current_ensemble
        for index in self._metadata.write_set(add.entry_id):
            bookie = ensemble[index]
            if add.sent_to.get(index) == bookie or index in self._failed_bookies:
                continue
            add.sent_to[index] = bookie
            add.acked.discard(index)
            self._ctx.pool.connection(bookie).submit(
                functools.partial(self._add_request, add),
                functools.partial(self._on_add_response, add, index, bookie),
            )

    def _add_request(self, add: _PendingAdd, request_id: int) -> AddEntryRequest:
        return AddEntryRequest(request_id, self.ledger_id, add.entry_id, add.lac_sent, False,
                               add.body, self._master_key)  # fmt: skip

    def _on_add_response(
        self, add: _PendingAdd, index: int, bookie: str, outcome: Response | LedgerError
    ) -> None:
        if add.finished or add.sent_to.get(index) != bookie:
            return  # stale: already completed/failed, or this index moved to another bookie
        if isinstance(outcome, AddEntryResponse) and outcome.status is Status.OK:
            add.acked.add(index)
            if len(add.acked) >= self._metadata.ack_quorum:
                self._complete_in_order()
            return
        if isinstance(outcome, AddEntryResponse) and outcome.status is Status.FENCED:
            self._fail(LedgerFencedError(f"bookie {bookie} says ledger {self.ledger_id} is fenced"))
            return
        if self._failed_bookies.get(index) != bookie:  # one line per failure, not per add
            log.warning("ledger %d entry %d: bookie %s failed: %s", self.ledger_id, add.entry_id,
                        bookie, outcome if isinstance(outcome, LedgerError) else outcome.status)
        self._bookie_failed(index, bookie)

    def _complete_in_order(self) -> None:
        if self._changing_ensemble:
            return  # the LAC must not move past the fragment boundary being written
        quorum = self._metadata.ack_quorum
        while self._pending:
            add = self._pending[0]
            if len(add.acked) < quorum:
                break
            self._pending.popleft()
            self._lac = add.entry_id
            self._length = add.ledger_length
            add.finish()
        if not self._pending:
            self._set_drained()
            self._unwatch()
            if (self._lac > self._lac_told and not self._explicit_lac_pending
                    and self._ctx.explicit_lac_delay_s > 0):
                self._explicit_lac_pending = True
                self._ctx.timers.lac_after_pause(self)

    def send_explicit_lac(self) -> None:
        """After a pause in adds, tell the last fragment's bookies the LAC (fire and forget:
        a lost WRITE_LAC only leaves readers one entry behind until the next add)."""
        self._explicit_lac_pending = False
        if self._pending or self._error is not None or self._closed or self._closing:
            return  # the next add piggybacks the LAC; a closed ledger has its last entry
        lac = self._lac
        if lac <= self._lac_told:
            return
        self._lac_told = lac
        for bookie in self._metadata.current_ensemble:
            self._ctx.pool.connection(bookie).submit(
                functools.partial(WriteLacRequest, ledger_id=self.ledger_id, lac=lac),
                functools.partial(self._on_write_lac_response, bookie),
            )

    def _on_write_lac_response(self, bookie: str, outcome: Response | LedgerError) -> None:
        if isinstance(outcome, LedgerError) or outcome.status is not Status.OK:
            log.debug("ledger %d: explicit LAC to %s: %r", self.ledger_id, bookie, outcome)

    def _set_drained(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    def _fail(self, error: LedgerError) -> None:
        if self._error is None:
            self._error = error
        pending = list(self._pending)
        self._pending.clear()
        for add in pending:
            add.error = self._error
            add.finish()
        self._set_drained()
        self._unwatch()

    # --- ensemble change ------------------------------------------------------------------

    def _bookie_failed(self, index: int, bookie: str) -> None:
        if self._error is not None or self._closed:
            return
        if self._metadata.current_ensemble[index] != bookie:
            return  # already replaced
        self._failed_bookies[index] = bookie
        self._failed_at[bookie] = trio.current_time()
        if not self._changing_ensemble:
            self._changing_ensemble = True
            self._ctx.nursery.start_soon(self._change_ensemble)

    async def _change_ensemble(self) -> None:
        try:
            waiting_since: float | None = None
            while self._failed_bookies and self._error is None:
                failed = dict(self._failed_bookies)
                try:
                    await self._replace_bookies(failed)
                except NotEnoughBookiesError as exc:
                    if not self._pending:
                        log.warning("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
                        self._fail(exc)
                        return
                    if waiting_since is None:  # one line per episode, not per retry
                        waiting_since = trio.current_time()
                        log.warning("ledger %d: no bookie can replace %s yet; adds wait for "
                                    "one to return (%s)", self.ledger_id,
                                    sorted(failed.values()), exc)  # fmt: skip
                    # the watchdog fails the handle at the oldest add's deadline
                    await trio.sleep(_REPLACEMENT_RETRY_S)
                    continue
                except LedgerError as exc:
                    log.warning("ledger %d: ensemble change failed: %r", self.ledger_id, exc)
                    self._fail(exc)
                    return
                except Exception as exc:  # a bug must fail this handle, not the whole client
                    log.exception("ledger %d: ensemble change crashed", self.ledger_id)
                    self._fail(LedgerError(f"ensemble change failed: {exc!r}"))
                    return
                for index, bookie in failed.items():
                    if self._failed_bookies.get(index) == bookie:
                        del self._failed_bookies[index]
                    for add in self._pending:  # a returned bookie gets every add again
                        if add.sent_to.get(index) == bookie:
                            del add.sent_to[index]
                if waiting_since is not None:
                    log.warning("ledger %d: ensemble repaired after %.1f s", self.ledger_id,
                                trio.current_time() - waiting_since)  # fmt: skip
                    waiting_since = None
                for add in list(self._pending):
                    self._send_missing(add)
        finally:
            self._changing_ensemble = False
            if self._error is None:
                self._complete_in_order()

    async def _replace_bookies(self, failed: dict[int, str]) -> None:
        available = await self._ctx.available_bookies()
        ensemble = list(self._metadata.current_ensemble)
        for index in sorted(failed):
            ensemble[index] = await self._choose_replacement(available, ensemble, index)
        if all(ensemble[i] == b for i, b in failed.items()) and self._error is None:
            log.info("ledger %d: bookies %s answer again; resending to them", self.ledger_id,
                     sorted(failed.values()))  # fmt: skip
        first_unacked = self._lac + 1
        proposed = self._metadata.with_new_ensemble(first_unacked, ensemble)
        while True:
            try:
                self._version = await self._ctx.cas_metadata(
                    self.ledger_id, proposed, self._version
                )
                break
            except MetadataVersionConflict:
                current, self._version = await self._ctx.read_metadata(self.ledger_id)
                if current.state is not LedgerState.OPEN:
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} is {current.state.value}: fenced by another "
                        f"client during an ensemble change"
                    ) from None
                proposed = current.with_new_ensemble(first_unacked, ensemble)
        self._metadata = proposed
        self.ensemble_changes += 1
        log.info("ledger %d: new ensemble %s from entry %d (replaced %s)", self.ledger_id,
                 ensemble, first_unacked, sorted(failed.values()))  # fmt: skip

    async def _choose_replacement(self, available: list[str], ensemble: list[str],
                                  index: int) -> str:  # fmt: skip
        """A bookie for ensemble slot `index`: one that never failed this writer if any is
        registered, else one that failed earlier (the longest ago first, the slot's own bookie
        included) and answers a probe now. NotEnoughBookiesError when there is none."""
        try:
            return self._ctx.placement.choose_replacement(
                available, ensemble, exclude=self._failed_at
            )
        except NotEnoughBookiesError:
            pass
        others = set(ensemble[:index] + ensemble[index + 1:])
        returned = sorted((b for b in set(available) & self._failed_at.keys() if b not in others),
                          key=lambda b: self._failed_at[b])  # fmt: skip
        for bookie in returned:
            if await self._answers(bookie):
                return bookie
        raise NotEnoughBookiesError(
            f"no bookie outside {sorted(others)} is available and answering"
        )

    async def _answers(self, bookie: str) -> bool:
        """Whether `bookie` answers a request now (a read of this ledger's LAC)."""
        with trio.move_on_after(min(_PROBE_TIMEOUT_S, self._ctx.timeout_s)):
            try:
                await self._ctx.pool.read_lac(bookie, self.ledger_id)
            except (BKTimeoutError, BookieUnavailableError):
                return False
            except LedgerError:
                return True  # it answered, with an error status: it is up
            return True
        return False
