"""The bookie journal's writer: an append-only write-ahead log with group commit.

Files and records: journal_format.py (file header, 36-byte record header with CRC-32C; ADD,
FENCE and DELETE records).  A group and its release (waking its waiters, running its
callbacks): journal_group.py.  Placement in the file, rollover, the worker threads' writes, the
clean close and trimming: journal_files.py (bound in Journal's class body).

Group commit: ``append`` puts a record into the open group and waits.  The group is taken
when a trigger fires — ``bytes`` (the group reached journal_group_bytes),
``max_wait`` (journal_max_group_wait_s since the group's first record) or ``queue_empty``
(optional: nothing else is waiting) — and writes it with one writev and one fdatasync in a
worker thread (which also encodes the record headers and their CRCs, off the Trio thread).
The thread's completion, delivered to the Trio thread, releases every waiter of that group and,
when adds arrived meanwhile, starts the next group's write at once.  With
``max_writes_in_flight`` > 1 a group may start while earlier ones are still being written and
fsynced (each in its own worker thread, at its own offset): an add that arrives during a write
waits for one fsync of its own instead of the rest of that write plus its own (a virtual
disk takes overlapping fdatasyncs about as fast as one).  Groups are still *released* strictly
in the order they started: a group whose fsync returned first waits for every earlier group,
and once one failed, every later one fails too (its records may follow a hole).  A rollover
starts only when no write is in flight and nothing starts beside it.  With the queue-empty
trigger a group opened on an idle journal by a lone writer (the last group held one record) is
started at the end of a scheduler pass, by a Trio instrument hook (``_pass_ended``): once no
task is runnable, or two busy passes later, so every add made meanwhile joins it; no task step
and no extra pass.  After groups of several records the journal task (a waiting add: the add
itself) starts it after one checkpoint, so I/O arriving over two more passes joins too.  Groups
under steady load are chained by the completions, without the journal task.
An add still returns only after its record is on disk.  ``append_soon`` journals a record
without a waiting task: its callback runs in the Trio thread when the group is released
(fsynced, or failed).  Files roll over at journal_max_file_bytes; a restarted bookie never
appends to an old file.

Preallocation (``preallocate_bytes`` > 0, as BookKeeper's journalPreAllocSizeMB): a group write
that grows the file makes its fdatasync flush the new file size too.  So the file is filled
with zeroes ahead of the write position, a chunk at a time, by a thread of its own with its own
fdatasync, started when less than half a chunk is left ahead; group writes then overwrite
blocks that exist (a 128 KiB write + fdatasync: ~0.36-0.5 ms instead of ~0.5-0.8 ms appending,
posix_fallocate's unwritten extents in between; ext4, this machine).  A zero fill starts
beyond every placed group; a group placed over a fill in flight stops it (the fill writes a
MiB step at a time under a lock, below a limit the group lowers, and the group's thread takes
that lock before writing), so zeroes never land after a record.  A rollover waits for a fill
in flight and cuts the old file back to its last record; so does a clean close.  The scanner
reads a zero-filled tail as the end of the file.

Replay reads the files with ``journal_scanner.JournalScanner``.

This module must never acknowledge a record before its fsync, and never accept a torn record.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import outcome
import trio

from . import journal_files
from .file_format import FILE_HEADER_SIZE
from .journal_format import RECORD_HEADER_SIZE, LogMark
from .journal_group import JournalFailedError, JournalGroup
from .journal_preallocation import ZeroFill

log = logging.getLogger(__name__)

# Scheduler passes with tasks still runnable that an idle journal's new group waits for more
# adds before its write starts anyway (Journal._pass_ended).
_BUSY_PASSES = 2


class _PassEnd(trio.abc.Instrument):
    """Tells a journal that the scheduler finished a pass (the queue-empty trigger's hook)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def before_io_wait(self, timeout: float) -> None:
        self._journal._pass_ended(timeout)


class Journal:
    """The writing side: group commit into the current journal file, rollover, trimming."""

    def __init__(
        self,
        directory: Path,
        *,
        first_file_id: int,
        fsync: bool = True,
        max_group_wait_s: float = 0.002,
        group_bytes: int = 512 * 1024,
        max_file_bytes: int = 512 << 20,
        flush_when_queue_empty: bool = False,
        max_writes_in_flight: int = 1,
        preallocate_bytes: int = 0,
    ) -> None:
        self._dir = directory
        self._fsync = fsync
        self._max_wait = max_group_wait_s
        self._group_bytes = group_bytes
        self._max_file_bytes = max_file_bytes
        self._flush_when_queue_empty = flush_when_queue_empty
        self._max_writes = max(1, max_writes_in_flight)
        self._zero_fill = ZeroFill(preallocate_bytes)  # the current file's (preallocation)
        self._next_file_id = first_file_id
        self._fd = -1  # the worker threads' file; replaced only by a write running alone
        self._file_id = -1
        self._file_size = 0  # bytes placed in the current file so far (in the Trio thread)
        self._open = JournalGroup()
        self._wake = trio.Event()  # wakes the journal task: a first record, or a write ended
        # the group an add opened on an idle journal, until a pass end starts it (queue-empty
        # trigger), and the busy passes it waited so far
        self._joining: JournalGroup | None = None
        self._joining_passes = 0
        self._last_group_records = 1  # in the group started last
        self._pass_end = _PassEnd(self)
        self._token: trio.lowlevel.TrioToken | None = None
        self._failed: BaseException | None = None
        self._write_error: BaseException | None = None  # the journal task raises it
        self._stopping = False
        self._closed = False  # the journal task closed the file: no further add is taken
        self.written_mark = LogMark(first_file_id, FILE_HEADER_SIZE)
        # groups handed to worker threads, in the order they started (and are released)
        self._writing: collections.deque[JournalGroup] = collections.deque()
        self._rolling = False  # a write that starts the next file is in flight: it runs alone
        self.triggers: Counter[str] = Counter()  # why groups were written (for tests/metrics)
        self.groups_written = 0
        # called with the seconds each group write + fsync took (metrics); None: not timed
        self.fsync_observer: Callable[[float], None] | None = None

    async def open(self) -> None:
        file_id = self._next_file_id
        self._next_file_id += 1
        await trio.to_thread.run_sync(self._start_file, file_id)
        self._file_id, self._file_size = file_id, FILE_HEADER_SIZE
        self._zero_fill.zeroed_end = FILE_HEADER_SIZE
        self.written_mark = LogMark(self._file_id, self._file_size)

    @property
    def current_file_id(self) -> int:
        return self._file_id

    @property
    def failed(self) -> bool:
        """A write failed: no further record can be acknowledged."""
        return self._failed is not None

    @property
    def closed(self) -> bool:
        """The journal task closed the file: every further add is refused."""
        return self._closed

    # the file: placement and rollover, the worker threads' writes, close and trimming
    # (journal_files.py; bound here, so no call gains a layer)
    _start_file = journal_files._start_file
    _needs_roll = journal_files._needs_roll
    _place = journal_files._place
    _write_and_sync = journal_files._write_and_sync
    _shutdown = journal_files._shutdown
    _close_file = journal_files._close_file
    trim_before = journal_files.trim_before
    _unlink_older = journal_files._unlink_older

    def _can_start(self, group: JournalGroup) -> bool:
        """Whether `group` may be handed to a worker now (a free slot; a rollover alone)."""
        if self._rolling or len(self._writing) >= self._max_writes:
            return False
        if self._zero_fill.in_flight is not None and self._needs_roll(group):
            return False  # the file it closes is being zero-filled
        return not self._writing or not self._needs_roll(group)

    async def append(
        self, rec_type: int, ledger_id: int, entry_id: int, lac: int, payload: bytes = b""
    ) -> None:
        """Journal one record; return once it is fsynced (raises if the journal failed)."""
        group, opens_idle_group = self._enqueue(rec_type, ledger_id, entry_id, lac, payload)
        if opens_idle_group and not self._joins_at_pass_end(group):
            if self._flush_when_queue_empty and self._token is not None and not self._stopping:
                # The queue-empty trigger, fired by this add instead of the journal task (one
                # task step less): every add runnable now joins during this checkpoint.
                await trio.lowlevel.cancel_shielded_checkpoint()
                if self._open is group and self._can_start(group) and not self._stopping \
                        and self._write_error is None:  # fmt: skip
                    trigger = "bytes" if group.nbytes >= self._group_bytes else "queue_empty"
                    self._start_write(group, trigger)
            else:
                self._wake.set()  # the journal task times the group (max wait) or starts it
        await group.wait_released()
        if group.error is not None:
            raise JournalFailedError(f"journal write failed: {group.error!r}") from group.error

    def append_soon(self, rec_type: int, ledger_id: int, entry_id: int, lac: int,
                    payload: bytes, on_done: Callable[[BaseException | None], None]) -> None:
        """Journal one record without a waiting task: `on_done` is called in the Trio thread
        with None once the record is fsynced, or with the JournalFailedError of its group.
        Raises JournalFailedError at once if the journal already failed.  A group this record
        opens on an idle journal is started at a pass end (`_joins_at_pass_end`) or by the
        journal task (after one checkpoint, so the adds runnable now join it); under load the
        previous group's completion starts it."""
        group, opens_idle_group = self._enqueue(rec_type, ledger_id, entry_id, lac, payload)
        group.callbacks.append(on_done)
        if opens_idle_group and not self._joins_at_pass_end(group):
            self._wake.set()

    def _joins_at_pass_end(self, group: JournalGroup) -> bool:
        """Whether `group`, just opened on an idle journal, is left to the scheduler's pass end
        (`_pass_ended`): with the queue-empty trigger, when the last group started held one
        record (a lone writer).  Adds that came together lately keep the journal task's (or
        the adder's) checkpoint: I/O arriving over that pass and the next joins too, and a
        shorter join shrank 8 RocketMQ senders' groups and cost CPU per send (measured)."""
        if not self._flush_when_queue_empty or self._token is None or self._stopping \
                or self._last_group_records > 1:  # fmt: skip
            return False
        self._joining, self._joining_passes = group, 0
        return True

    def _pass_ended(self, timeout: float) -> None:
        """The queue-empty trigger, called by the scheduler at the end of each pass (before it
        waits for I/O, `timeout` at most; no task runs here): the group an add opened on an
        idle journal is started once no task is runnable (timeout > 0: an add can only come
        from I/O not yet seen), or after _BUSY_PASSES passes with tasks runnable.  Every add
        made until then joins it, without the journal task's two steps and the pass between
        them.  Only starts a thread here: a task woken now would wait for the I/O timeout."""
        group = self._joining
        if group is None:
            return
        if timeout <= 0 and self._joining_passes < _BUSY_PASSES:
            self._joining_passes += 1
            return
        self._joining = None
        if self._open is not group or not self._can_start(group) or self._stopping \
                or self._write_error is not None or self._failed is not None:  # fmt: skip
            return  # taken by a completion, or left to one; or the journal task ends
        try:
            self._start_write(group, "bytes" if group.nbytes >= self._group_bytes
                              else "queue_empty")
        except Exception as exc:  # the scheduler must not see it: the journal task raises it
            self._write_error = exc
            assert self._token is not None
            self._token.run_sync_soon(self._wake.set)

    def _enqueue(self, rec_type: int, ledger_id: int, entry_id: int, lac: int,
                 payload: bytes) -> tuple[JournalGroup, bool]:
        """Put a record into the open group: (the group, whether it opened an idle journal's
        group, which nobody else will start)."""
        if self._failed is not None:
            raise JournalFailedError(f"journal failed: {self._failed!r}")
        if self._closed:
            raise JournalFailedError("journal closed")
        group = self._open
        opens_idle_group = not group.buffers and self._can_start(group)
        if not group.buffers:
            group.first_arrival = trio.current_time()
        group.buffers.append((rec_type, ledger_id, entry_id, lac, payload))
        group.nbytes += RECORD_HEADER_SIZE + len(payload)
        if group.nbytes >= self._group_bytes and group.full is not None:
            group.full.set()
        # else writes fill every slot and a completion takes this group
        return group, opens_idle_group

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The journal task: start a group's write when a trigger fires (writes that follow
        one another are chained by the completions); raises what failed a write."""
        self._token = trio.lowlevel.current_trio_token()
        if self._flush_when_queue_empty:
            trio.lowlevel.add_instrument(self._pass_end)
        task_status.started()
        self._maybe_preallocate()  # the first chunk, before the first group needs it
        try:
            while True:
                if self._write_error is not None:
                    raise self._write_error
                group = self._open
                if not group.buffers or not self._can_start(group) or group is self._joining:
                    await self._wake.wait()  # (a pass end starts the joining group)
                    self._wake = trio.Event()
                    continue
                trigger = await self._wait_for_trigger(group)
                taken = self._open is not group or not self._can_start(group)
                if not taken and self._write_error is None:  # else an add or a completion did
                    self._start_write(group, trigger)
        finally:
            self._stopping = True
            if self._flush_when_queue_empty:
                with contextlib.suppress(KeyError):  # (trio drops an instrument that raised)
                    trio.lowlevel.remove_instrument(self._pass_end)
            with trio.CancelScope(shield=True):
                while self._writing or self._zero_fill.in_flight is not None:  # threads use it
                    self._wake = trio.Event()
                    await self._wake.wait()
                await self._shutdown()

    async def drain(self) -> None:
        """Wait until every record appended so far is written and fsynced (clean shutdown)."""
        while True:
            group = self._writing[-1] if self._writing else self._open
            if not group.buffers:
                return
            await group.wait_released()

    async def _wait_for_trigger(self, group: JournalGroup) -> str:
        if group.nbytes >= self._group_bytes:
            return "bytes"
        if self._flush_when_queue_empty:
            await trio.lowlevel.checkpoint()  # let every runnable add join first
            return "bytes" if group.nbytes >= self._group_bytes else "queue_empty"
        remaining = group.first_arrival + self._max_wait - trio.current_time()
        if remaining > 0:
            if group.full is None:
                group.full = trio.Event()
            with trio.move_on_after(remaining):
                await group.full.wait()
        return "bytes" if group.nbytes >= self._group_bytes else "max_wait"

    def _start_write(self, group: JournalGroup, trigger: str) -> None:
        """Hand `group` to a worker thread (write + fsync); `_write_finished` follows in the
        Trio thread.  At most max_writes_in_flight groups are written at a time (a rollover
        alone): the next waits in `_open`."""
        assert self._can_start(group) and self._token is not None
        self.triggers[trigger] += 1
        self._last_group_records = len(group.buffers)
        self._open = JournalGroup()
        self._writing.append(group)
        if self._failed is not None:
            self._write_finished(group, 0.0, outcome.Error(self._failed))
            return
        offset, roll_to, truncate_to = self._place(group)
        group.starts_file = self._rolling = roll_to is not None
        over_fill = self._zero_fill.placed(offset, self._file_size)
        token = self._token
        finished = functools.partial(self._write_finished, group, time.perf_counter())

        def deliver(result: outcome.Outcome[None]) -> None:  # in the worker thread
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(finished, result)

        # No thread name: Trio would set it and set it back with two prctl calls per group.
        trio.lowlevel.start_thread_soon(functools.partial(
            self._write_and_sync, group.buffers, offset, roll_to, truncate_to, over_fill),
            deliver)
        self._maybe_preallocate()

    def _maybe_preallocate(self) -> None:
        """In the Trio thread: start zero-filling the next chunk of the current file when less
        than half a chunk is left ahead of the placed groups (and nothing else forbids it)."""
        if self._rolling or self._stopping or self._failed is not None or self._token is None \
                or self._fd < 0:  # fmt: skip
            return
        fill = self._zero_fill.next_range(self._file_size, self._max_file_bytes)
        if fill is None:
            return
        token = self._token
        finished = self._zero_fill_finished

        def deliver(result: outcome.Outcome[int]) -> None:  # in the worker thread
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(finished, result)

        trio.lowlevel.start_thread_soon(
            functools.partial(self._zero_fill.fill, self._fd, *fill, self._fsync), deliver)

    def _zero_fill_finished(self, result: outcome.Outcome[int]) -> None:
        """In the Trio thread: the fill ended; a rollover or the shutdown may have waited."""
        self._zero_fill.finished(result)
        if self._write_error is None:
            self._start_following()
        else:
            self._wake.set()
        self._maybe_preallocate()

    def _write_finished(self, group: JournalGroup, started: float, result: outcome.Outcome[None]
                        ) -> None:  # fmt: skip
        """In the Trio thread, once a worker returned: note its outcome, release every group
        at the head of the start order whose write ended (only now: their records and every
        earlier group's are fsynced), then start the next group if adds arrived meanwhile."""
        group.write_result = result
        group.write_seconds = time.perf_counter() - started
        if group.starts_file:
            self._rolling = False
        while self._writing and self._writing[0].write_result is not None:
            head = self._writing.popleft()
            self._release(head)
        if self._write_error is not None:
            self._wake.set()  # the journal task raises it (or finishes its shutdown)
            return
        self._start_following()
        if group.starts_file:
            self._maybe_preallocate()

    def _start_following(self) -> None:
        """Start the open group at once if its adds already waited through a write (or a zero
        fill); else wake the journal task to time it."""
        following = self._open
        full = following.nbytes >= self._group_bytes
        if following.buffers and (self._flush_when_queue_empty or full) \
                and self._can_start(following):  # fmt: skip
            # these adds waited through a write: none is gained by waiting longer
            self._start_write(following, "bytes" if full else "queue_empty")
        elif following.buffers or self._stopping:
            self._wake.set()  # a group to time or start, or the shutdown waiting for writes

    def _release(self, group: JournalGroup) -> None:
        result = group.write_result
        if isinstance(result, outcome.Value) and self._failed is not None:
            # an earlier group failed: this one's records may follow a hole in the file
            result = outcome.Error(JournalFailedError(f"journal failed: {self._failed!r}"))
        if isinstance(result, outcome.Error):
            exc = result.error
            group.error = exc if isinstance(exc, Exception) else JournalFailedError("closed")
            # Whatever failed the write (a disk error, or a bug: either way its records may be
            # missing), the groups placed after it follow a hole that replay stops at: none of
            # them may be acknowledged, nor any add taken from now on.
            if self._failed is None and isinstance(exc, OSError):
                log.error("journal write failed, refusing further adds: %r", exc)
            if self._failed is None or isinstance(exc, OSError):
                self._failed = exc
            if self._write_error is None:
                self._write_error = exc
            group.release()
            return
        if self.fsync_observer is not None:
            try:
                self.fsync_observer(group.write_seconds)
            except Exception:
                log.exception("journal fsync observer failed")
        self.groups_written += 1
        self.written_mark = group.end_mark
        group.release()
