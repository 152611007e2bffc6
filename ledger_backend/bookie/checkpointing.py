"""The durable storage engine's checkpoint (a mixin of DurableBookieStorage, storage.py).

Step 2 of storage.py's DURABILITY RULE, in its order: the journal mark is taken and the write
cache's generation swapped first (no await between them), the generation is written to the
entry logs and fdatasynced (in steps, so the journal's fdatasyncs are not held up behind one
large writeback), then the new locations, changed ledger states and deletes go to the index log
and are fsynced, then the mark is persisted, and only then are older journal files trimmed.
A failed checkpoint puts the generation, the dirty states and the deletes back for the next.
Each step has its crash point. The loop runs a checkpoint every flush_interval_s, or sooner
when asked (`request_flush`: the write cache is filling).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import trio

from .checkpoint_mark import write_mark
from .crash_points import crash_point
from .entry_index import (
    REC_LOCATIONS,
    EntryIndex,
    IndexLog,
    encode_deletes,
    encode_index_record,
    encode_state_record,
)
from .entry_log import EntryLogWriter
from .journal import Journal
from .journal_format import LogMark
from .ledger_state import LedgerState, LedgerStateTable
from .storage_api import BookieStorageConfig
from .write_cache import WriteCache, sorted_entries

log = logging.getLogger("ledger_backend.bookie.storage")


@dataclass
class CheckpointStats:
    checkpoints: int = 0
    entries_flushed: int = 0
    bytes_flushed: int = 0

class Checkpoints:
    config: BookieStorageConfig
    journal: Journal | None
    write_cache: WriteCache
    states: LedgerStateTable
    index: EntryIndex
    index_log: IndexLog
    writer: EntryLogWriter
    mark_path: Path
    checkpoint_lock: trio.Lock
    stats: CheckpointStats
    _pending_deletes: list[int]
    _persisted_mark: LogMark | None
    _flush_requested: trio.Event
    _flush_finished: trio.Event

    def request_flush(self) -> None:
        self._flush_requested.set()

    async def checkpoint(self) -> None:
        assert self.journal is not None
        async with self.checkpoint_lock:
            await self.checkpoint_locked(self.journal.written_mark)

    async def checkpoint_locked(self, mark: LogMark) -> None:
        # No await before start_flush: every record before `mark` is in this generation.
        generation = self.write_cache.start_flush()
        dirty = self.states.take_dirty()
        deletes, self._pending_deletes = self._pending_deletes, []
        if not (generation or dirty or deletes) and mark == self._persisted_mark:
            self.write_cache.finish_flush()  # idle: nothing new since the last checkpoint
            return
        try:
            entries = sorted_entries(generation)
            await self._flush_generation(entries, dirty, deletes)
        except BaseException:
            self.write_cache.abort_flush()
            self.states.restore_dirty(i for i, _ in dirty)
            self._pending_deletes[:0] = deletes
            self._wake_adders()
            raise
        await trio.to_thread.run_sync(
            lambda: write_mark(self.mark_path, mark, fsync=self.config.fsync)
        )
        self._persisted_mark = mark
        crash_point("checkpoint.after_mark")
        assert self.journal is not None
        await self.journal.trim_before(mark.file_id)
        await self._maybe_rewrite_index_log()

    async def _flush_generation(
        self,
        entries: list[tuple[int, int, bytes]],
        dirty: list[tuple[int, LedgerState]],
        deletes: list[int],
    ) -> None:
        locations: list[int] = []
        if entries:
            locations = await trio.to_thread.run_sync(self._write_entries_blocking, entries)
        crash_point("checkpoint.after_entrylog_fsync")
        batch: dict[int, list[tuple[int, int, int]]] = {}
        for (ledger_id, entry_id, data), location in zip(entries, locations, strict=True):
            state = self.states.get(ledger_id)
            if state is not None and not state.deleted:
                batch.setdefault(ledger_id, []).append((entry_id, location, len(data)))
        records = []
        if batch:
            records.append(encode_index_record(REC_LOCATIONS, self.index.encode_locations(batch)))
        if dirty:
            records.append(encode_state_record(dirty))
        if deletes:
            records.append(encode_deletes(deletes))
        if records:
            await trio.to_thread.run_sync(self.index_log.append, records)
        for ledger_id, rows in batch.items():
            state = self.states.get(ledger_id)
            if state is None or state.deleted:
                continue  # deleted meanwhile; its delete record goes out with the next checkpoint
            for entry_id, location, size in rows:
                self.index.set(ledger_id, entry_id, location, size)
        self.write_cache.finish_flush()
        self._wake_adders()
        crash_point("checkpoint.after_index_flush")
        self.stats.checkpoints += 1
        self.stats.entries_flushed += len(entries)
        self.stats.bytes_flushed += sum(len(e[2]) for e in entries)

    def _write_entries_blocking(self, entries: list[tuple[int, int, bytes]]) -> list[int]:
        """Write a checkpoint's entries to the entry log and fdatasync them, in steps of
        about entry_log_sync_bytes: the journal shares the disk, and a journal fdatasync that
        meets one large writeback (a second of produce at 20 MB/s) waits for much of it,
        holding up every acknowledgement behind it (benchmarks/bench_kafka.py latency: the
        p99 came from these once-a-checkpoint stalls).  The checkpoint's mark is written
        only after the last step, so what is durable when is unchanged.  A large checkpoint
        (sustained produce well above 20 MB/s, the write cache filling) takes at most ~16
        steps: each fdatasync costs a round trip, and there a checkpoint's length bounds
        throughput."""
        step = self.config.entry_log_sync_bytes
        if step > 0:
            step = max(step, sum(len(data) for _l, _e, data in entries) // 16)
        locations: list[int] = []
        start = size = 0
        for i, (_ledger, _entry, data) in enumerate(entries):
            size += len(data)
            if step > 0 and size >= step:
                locations += self.writer.write(entries[start:i + 1])
                self.writer.sync()
                start, size = i + 1, 0
                if start < len(entries):
                    crash_point("checkpoint.between_entrylog_steps")
        if start < len(entries):
            locations += self.writer.write(entries[start:])
            self.writer.sync()
        return locations

    def _wake_adders(self) -> None:
        self._flush_finished.set()
        self._flush_finished = trio.Event()

    async def _maybe_rewrite_index_log(self) -> None:
        live = 24 * self.index.entry_count + 25 * len(self.states) + (64 << 10)
        if self.index_log.size <= self.config.index_log_rewrite_ratio * live:
            return
        records = [
            encode_index_record(REC_LOCATIONS, body) for body in self.index.snapshot_locations()
        ]
        records.append(encode_state_record(self.states.snapshot()))
        await trio.to_thread.run_sync(self.index_log.rewrite, records)
        log.info(
            "index log rewritten as generation %d (%d bytes)",
            self.index_log.generation,
            self.index_log.size,
        )

    async def _checkpoint_loop(self) -> None:
        while True:
            with trio.move_on_after(self.config.flush_interval_s):
                await self._flush_requested.wait()
            self._flush_requested = trio.Event()
            try:
                await self.checkpoint()
            except Exception:
                log.exception("checkpoint failed; will retry")
                await trio.sleep(min(self.config.flush_interval_s, 1.0))
