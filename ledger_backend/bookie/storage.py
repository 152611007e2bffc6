"""The durable bookie storage engine (BookKeeper-style) and ``open_bookie_storage``.

Layout under data_dir: ``journal/*.jnl`` (write-ahead log), ``ledgers/entrylogs/*.log``
(entries of many ledgers), ``ledgers/index/*.idx`` (entry locations + ledger states) and
``ledgers/checkpoint.mark`` (the log mark).  Reads (caches, entry-log runs) are in
``entry_reads.py``; the checkpoint (step 2 below) is ``checkpointing.py``'s.

DURABILITY RULE (the one place it is written down):
  1. An add, fence or delete is acknowledged only after its journal record is fsynced (group
     commit).  Its effect is put in memory (write cache, ledger state) *before* the record is
     queued, so a checkpoint that captures the journal mark first and swaps the write cache
     second always covers every record before the mark.
  2. A checkpoint then does, strictly in this order: write the swapped write-cache generation to
     the entry logs and fsync them; append the new locations, changed ledger states and deletes
     to the index log and fsync it; persist the log mark (atomic replace + fsync + directory
     fsync); only then delete journal files older than the mark.
  3. Start-up loads the index log, replays the journal from the mark (stopping at the first torn
     or bad record and logging where), checkpoints with the mark at the start of the next
     journal file, only then creates that file, and only then accepts adds.
Killing the process between any two steps loses nothing acknowledged: whatever the index does
not hold yet is still in the journal after the mark.  (tests/bookie_storage/ kill it at each.)

This module must never acknowledge before the journal fsync, never expose an index location
before its entry-log bytes are fsynced, and never trim a journal file the mark still needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..secret_files import make_private_dir
from .checkpoint_mark import MARK_FILE_NAME, read_mark
from .checkpointing import Checkpoints, CheckpointStats
from .disk_monitor import DiskMonitor
from .entry_index import (
    EntryIndex,
    IndexLog,
)
from .entry_log import EntryLogDirectory, EntryLogWriter
from .entry_reads import EntryReads
from .file_format import BadFileError
from .garbage_collector import CompactionResult, GarbageCollector, GcResult
from .journal import Journal
from .journal_format import TYPE_ADD, TYPE_DELETE, TYPE_FENCE, LogMark, list_journal_files
from .journal_replay import replay_journal
from .journal_scanner import ReplayStop
from .ledger_state import LedgerState, LedgerStateTable
from .read_cache import ReadCache
from .storage_api import (
    BookieError,
    BookieReadOnlyError,
    BookieStorage,
    BookieStorageConfig,
    LedgerFencedError,
    NoSuchLedgerError,
)
from .write_cache import WriteCache

log = logging.getLogger(__name__)

ActiveLedgers = Callable[[], Awaitable[set[int]]]


class StorageClosedError(BookieError):
    """The storage is shutting down or closed."""


class DurableBookieStorage(Checkpoints, BookieStorage):
    def __init__(self, config: BookieStorageConfig, active_ledgers: ActiveLedgers | None) -> None:
        self.config = config
        data_dir = make_private_dir(config.data_dir)  # journals and entries: owner-only
        self.journal_dir = data_dir / "journal"
        self.ledgers_dir = data_dir / "ledgers"
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        self.ledgers_dir.mkdir(parents=True, exist_ok=True)
        self.mark_path = self.ledgers_dir / MARK_FILE_NAME
        self.states = LedgerStateTable()
        self.index = EntryIndex()
        self.write_cache = WriteCache(config.write_cache_bytes)
        self.read_cache = ReadCache(config.read_cache_bytes)
        self.logs = EntryLogDirectory(self.ledgers_dir / "entrylogs", fsync=config.fsync)
        self.writer = EntryLogWriter(self.logs, max_bytes=config.entry_log_max_bytes)
        self.index_log = IndexLog(self.ledgers_dir / "index", fsync=config.fsync)
        self.reads = EntryReads(
            self.states, self.write_cache, self.read_cache, self.index, self.logs,
            read_ahead_entries=config.read_ahead_entries,
        )
        self.disk = DiskMonitor(
            data_dir,
            threshold=config.disk_usage_threshold,
            warn_threshold=config.disk_usage_warn_threshold,
            usage_function=config.disk_usage_function,
        )
        self.journal: Journal | None = None
        self.gc = GarbageCollector(self, active_ledgers)
        self.checkpoint_lock = trio.Lock()
        self.stats = CheckpointStats()
        self.replay_stop: ReplayStop | None = None
        self.replayed_records = 0
        self._pending_deletes: list[int] = []
        self._persisted_mark: LogMark | None = None
        self._flush_requested = trio.Event()
        self._flush_finished = trio.Event()
        self._lac_events: dict[int, trio.Event] = {}
        self._accepting = False
        # seconds spent in each start-up phase (logged; read by benchmarks and tests)
        self.startup_seconds: dict[str, float] = {}

    # ---- start-up -------------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        started = time.perf_counter()
        loaded: dict[int, LedgerState] = {}
        await trio.to_thread.run_sync(self.index_log.load, self.index, loaded)
        for ledger_id, state in loaded.items():
            self.states.load(ledger_id, state)
        index_loaded = time.perf_counter()
        try:
            mark = await trio.to_thread.run_sync(read_mark, self.mark_path) or LogMark(0, 0)
        except BadFileError as exc:  # replaying every journal file left is safe, just longer
            log.error("checkpoint mark unreadable (%s): replaying all journal files", exc)
            mark = LogMark(0, 0)
        existing = list_journal_files(self.journal_dir)
        first_new = max([mark.file_id, *existing]) + 1
        self.journal = Journal(
            self.journal_dir,
            first_file_id=first_new,
            fsync=self.config.fsync,
            max_group_wait_s=self.config.journal_max_group_wait_s,
            group_bytes=self.config.journal_group_bytes,
            max_file_bytes=self.config.journal_max_file_bytes,
            flush_when_queue_empty=self.config.journal_flush_when_queue_empty,
            max_writes_in_flight=self.config.journal_writes_in_flight,
            preallocate_bytes=self.config.journal_preallocate_bytes,
        )
        await replay_journal(self, mark)
        replayed = time.perf_counter()
        # The first checkpoint comes before the new journal file: its mark, the start of that
        # file, moves past a torn tail replay stopped at and trims it.  A new file created
        # first would outlive a crash in this checkpoint, and the next start would find the
        # torn tail followed by a later file: damage, refusing to start.
        await self.checkpoint()
        await self.journal.open()
        await nursery.start(self.journal.run)
        self.disk.read_only = await trio.to_thread.run_sync(self.disk.check)
        self._accepting = True
        nursery.start_soon(self._checkpoint_loop)
        nursery.start_soon(self._disk_loop)
        nursery.start_soon(self.gc.run_forever)
        self.startup_seconds = {
            "index_load": index_loaded - started,
            "journal_replay": replayed - index_loaded,
            "first_checkpoint": time.perf_counter() - replayed,
        }
        log.info(
            "bookie storage started in %.3f s: index of %d entries in %d ledgers loaded in "
            "%.3f s, %d journal records replayed in %.3f s, first checkpoint %.3f s",
            time.perf_counter() - started,
            self.index.entry_count,
            len(self.states),
            self.startup_seconds["index_load"],
            self.replayed_records,
            self.startup_seconds["journal_replay"],
            self.startup_seconds["first_checkpoint"],
        )

    # ---- in-memory effects (synchronous: never await between them and the journal enqueue) ---

    def apply_add(self, ledger_id: int, entry_id: int, lac: int, data: bytes) -> None:
        state = self.states.get_or_create(ledger_id)
        self.write_cache.put(ledger_id, entry_id, data)
        self.read_cache.drop_entry(ledger_id, entry_id)
        if lac > state.lac:
            state.lac = lac
        if entry_id > state.last_entry_id:
            state.last_entry_id = entry_id
        self.states.mark_dirty(ledger_id)

    def apply_fence(self, ledger_id: int) -> LedgerState:
        state = self.states.get_or_create(ledger_id)
        if not state.fenced:
            state.fenced = True
            self.states.mark_dirty(ledger_id)
        return state

    def apply_delete(self, ledger_id: int) -> None:
        state = self.states.get_or_create(ledger_id)
        state.deleted = state.fenced = True
        self.states.mark_dirty(ledger_id)
        self.write_cache.drop_ledger(ledger_id)
        self.read_cache.drop_ledger(ledger_id)
        self.index.delete_ledger(ledger_id)
        self._pending_deletes.append(ledger_id)
        self._notify_lac(ledger_id)

    def _notify_lac(self, ledger_id: int) -> None:
        event = self._lac_events.pop(ledger_id, None)
        if event is not None:
            event.set()

    def _check_accepting(self) -> Journal:
        if not self._accepting or self.journal is None:
            raise StorageClosedError("bookie storage is not open")
        return self.journal

    # ---- BookieStorage --------------------------------------------------------------------

    def _check_add(self, ledger_id: int, recovery_add: bool) -> None:
        if self.disk.read_only:
            raise BookieReadOnlyError("bookie is read-only (disk usage over threshold)")
        state = self.states.get(ledger_id)
        if state is not None and state.deleted:
            raise LedgerFencedError(f"ledger {ledger_id} was deleted on this bookie")
        if state is not None and state.fenced and not recovery_add:
            raise LedgerFencedError(f"ledger {ledger_id} is fenced")

    def start_add_entry(
        self, ledger_id: int, entry_id: int, lac: int, data: bytes,
        on_done: Callable[[BaseException | None], None], *, recovery_add: bool = False,
    ) -> bool:
        """add_entry without a waiting task (an in-process client's add): the same checks and
        in-memory effects now, then `on_done` in the Trio thread with None once the journal
        fsynced the entry, or with the error.  Returns False, having done nothing, when the
        add could not be taken at once (refused, or it would wait for room in the write
        cache): add_entry then does it and says why."""
        if not self._accepting or self.journal is None or type(data) is not bytes:
            return False
        try:
            self._check_add(ledger_id, recovery_add)
        except BookieError:
            return False
        if not self.write_cache.has_room_for(len(data)) or self.journal.failed \
                or self.journal.closed:  # fmt: skip
            return False
        self.apply_add(ledger_id, entry_id, lac, data)
        if self.write_cache.should_flush() or self.write_cache.is_full():
            self.request_flush()

        def journaled(error: BaseException | None) -> None:
            if error is None:
                self._notify_lac(ledger_id)
            on_done(error)

        self.journal.append_soon(TYPE_ADD, ledger_id, entry_id, lac, data, journaled)
        return True

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, data: bytes, *, recovery_add: bool = False
    ) -> None:
        journal = self._check_accepting()
        data = bytes(data)
        while True:
            self._check_add(ledger_id, recovery_add)
            if self.write_cache.has_room_for(len(data)):
                break
            self.request_flush()  # memory bound: wait for the flush rather than grow
            await self._flush_finished.wait()
            journal = self._check_accepting()
        self.apply_add(ledger_id, entry_id, lac, data)
        if self.write_cache.should_flush() or self.write_cache.is_full():
            self.request_flush()
        await journal.append(TYPE_ADD, ledger_id, entry_id, lac, data)
        self._notify_lac(ledger_id)

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        return await self.reads.read_entry(ledger_id, entry_id)

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last of one ledger (see EntryReads.read_entries)."""
        return await self.reads.read_entries(ledger_id, first, last)

    async def read_batch(self, ledger_id: int, first: int, max_entries: int,
                         max_bytes: int) -> list[bytes | memoryview]:  # fmt: skip
        """A batch read's entries (see EntryReads.read_batch)."""
        return await self.reads.read_batch(ledger_id, first, max_entries, max_bytes)

    async def fence(self, ledger_id: int) -> int:
        journal = self._check_accepting()
        if self.disk.read_only:
            raise BookieReadOnlyError(f"bookie is read-only; cannot fence ledger {ledger_id}")
        existing = self.states.get(ledger_id)
        if existing is not None and existing.deleted:
            return -1  # a deleted ledger stays fenced (tombstone) and holds nothing here
        state = self.apply_fence(ledger_id)
        await journal.append(TYPE_FENCE, ledger_id, -1, state.lac)
        return state.lac

    def is_fenced(self, ledger_id: int) -> bool:
        state = self.states.get(ledger_id)  # a deleted ledger holds nothing (adds still refused)
        return state is not None and state.fenced and not state.deleted

    def last_add_confirmed(self, ledger_id: int) -> int:
        state = self.states.get(ledger_id)
        if state is None or state.deleted:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        return state.lac

    def set_explicit_lac(self, ledger_id: int, lac: int) -> None:
        state = self.states.get(ledger_id)
        if state is None or state.deleted:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        if state.fenced:
            raise LedgerFencedError(f"ledger {ledger_id} is fenced")
        if lac > state.lac:
            state.lac = lac
            self._notify_lac(ledger_id)

    def last_entry_id(self, ledger_id: int) -> int:
        state = self.states.get(ledger_id)
        return -1 if state is None or state.deleted else state.last_entry_id

    async def wait_for_lac_update(self, ledger_id: int, previous_lac: int, timeout_s: float) -> int:
        deadline = trio.current_time() + timeout_s
        while True:
            state = self.states.get(ledger_id)
            current = -1 if state is None or state.deleted else state.lac
            if current > previous_lac or trio.current_time() >= deadline:
                return current
            event = self._lac_events.setdefault(ledger_id, trio.Event())
            with trio.move_on_at(deadline):
                await event.wait()

    async def delete_ledger(self, ledger_id: int) -> None:
        journal = self._check_accepting()
        self.apply_delete(ledger_id)
        await journal.append(TYPE_DELETE, ledger_id, -1, -1)

    def ledger_ids(self) -> list[int]:
        return self.states.live_ids()

    def is_read_only(self) -> bool:
        return self.disk.read_only

    def disk_usage(self) -> tuple[int, int]:
        return self.disk.usage()

    async def check_disk(self) -> bool:
        """Probe the disk now (tests); return whether the bookie is read-only."""
        self.disk.read_only = await trio.to_thread.run_sync(self.disk.check)
        return self.disk.read_only

    async def garbage_collect(self) -> GcResult:
        """Run one GC pass now (manual trigger; the background task does it every interval)."""
        return await self.gc.collect()

    async def compact(self, *, major: bool = False) -> CompactionResult:
        """Run a minor (or major) compaction now with the configured threshold."""
        cfg = self.config
        threshold = cfg.major_compaction_threshold if major else cfg.minor_compaction_threshold
        return await self.gc.compact(threshold)

    async def _disk_loop(self) -> None:
        while True:
            await trio.sleep(self.config.disk_check_interval_s)
            await self.check_disk()

    # ---- shutdown -------------------------------------------------------------------------

    async def close_files(self) -> None:
        def close_all() -> None:
            self.writer.close()
            self.logs.close()
            self.index_log.close()

        await trio.to_thread.run_sync(close_all)

    def describe(self) -> dict[str, Any]:
        """Figures for logs, metrics and tests."""
        journal = self.journal
        return {
            "ledgers": len(self.states),
            "entries_indexed": self.index.entry_count,
            "entry_logs": len(self.index.log_usage),
            "checkpoints": self.stats.checkpoints,
            "journal_triggers": dict(journal.triggers) if journal else {},
            "read_only": self.disk.read_only,
            "replay_stop": self.replay_stop,
        }


@asynccontextmanager
async def open_bookie_storage(
    config: BookieStorageConfig, active_ledgers: ActiveLedgers | None = None
) -> AsyncIterator[DurableBookieStorage]:
    """Open (and recover) the engine; checkpoint and close cleanly on exit."""
    storage = DurableBookieStorage(config, active_ledgers)
    try:
        async with trio.open_nursery() as nursery:
            await storage.start(nursery)
            try:
                yield storage
            finally:
                storage._accepting = False
                with trio.CancelScope(shield=True):
                    try:
                        if storage.journal is not None:
                            with trio.move_on_after(10):
                                await storage.journal.drain()
                        await storage.checkpoint()
                    except Exception:
                        log.exception("final checkpoint failed; the journal still has it all")
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await storage.close_files()
