"""Garbage collection and compaction of entry logs.

GC: ledgers this bookie holds that the metadata no longer lists (``active_ledgers()``) are
deleted locally; a checkpoint then makes every local delete durable in the index log; then
every entry log that holds no byte of a live ledger (and is not being written) is removed.
The active set is asked *after* noting which ledgers we hold, so a ledger created meanwhile
(it cannot be on this bookie before it exists in the metadata) is never mistaken for deleted.

Compaction: a log whose live bytes are below a threshold of its size (minor 20%, major 80% by
default) has its live entries copied into a new entry log, which is fsynced
(``compaction.after_copy``); the new locations are appended to the index log and fsynced, then
applied in memory with compare-and-set, so an entry rewritten meanwhile is left alone
(``compaction.after_index_update``); finally the old log is removed if nothing points into it.

Every removal happens under the storage's checkpoint lock, so a log written by a checkpoint
whose locations are not in the index yet is never taken for dead; logs that compaction is
still filling are marked protected.  The copy itself runs without the lock, so adds and
checkpoints carry on; the compare-and-set leaves alone any entry rewritten meanwhile.
This module must never remove a log that a durable index record still points into.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from .crash_points import crash_point
from .entry_index import REC_LOCATIONS, encode_index_record
from .entry_log import EntryLogCorruptError, EntryLogWriter, split_location
from .file_format import FILE_HEADER_SIZE
from .storage_parts import CollectorTarget

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 16 << 20


@dataclass
class GcResult:
    ledgers_deleted: list[int] = field(default_factory=list)
    logs_removed: list[int] = field(default_factory=list)


@dataclass
class CompactionResult:
    logs_compacted: list[int] = field(default_factory=list)
    entries_moved: int = 0
    bytes_moved: int = 0


class GarbageCollector:
    def __init__(
        self,
        storage: CollectorTarget,
        active_ledgers: Callable[[], Awaitable[set[int]]] | None,
    ) -> None:
        self.storage = storage
        self.active_ledgers = active_ledgers
        self.runs = 0

    async def run_forever(self) -> None:
        cfg = self.storage.config
        if cfg.gc_interval_s <= 0:
            return
        last_minor = last_major = trio.current_time()
        while True:
            await trio.sleep(cfg.gc_interval_s)
            try:
                await self.collect()
                now = trio.current_time()
                if 0 < cfg.major_compaction_interval_s <= now - last_major:
                    await self.compact(cfg.major_compaction_threshold)
                    last_major = last_minor = now
                elif 0 < cfg.minor_compaction_interval_s <= now - last_minor:
                    await self.compact(cfg.minor_compaction_threshold)
                    last_minor = now
            except Exception:
                log.exception("garbage collection failed; will retry")

    async def collect(self) -> GcResult:
        """One GC pass (also the manual trigger for tests)."""
        storage = self.storage
        result = GcResult()
        if self.active_ledgers is not None:
            held_before = set(storage.states.live_ids())
            active = await self.active_ledgers()
            for ledger_id in sorted(held_before - set(active)):
                state = storage.states.get(ledger_id)
                if state is not None and not state.deleted:
                    storage.apply_delete(ledger_id)
                    result.ledgers_deleted.append(ledger_id)
            if result.ledgers_deleted:
                log.info(
                    "GC: ledgers gone from the metadata, deleted here: %s", result.ledgers_deleted
                )
        async with storage.checkpoint_lock:
            assert storage.journal is not None
            await storage.checkpoint_locked(storage.journal.written_mark)
            on_disk = await trio.to_thread.run_sync(storage.logs.log_ids)
            current = storage.writer.current_log_id
            dead = [
                i
                for i in on_disk
                if i != current
                and not storage.index.log_usage.get(i)
                and not storage.logs.is_protected(i)
            ]
            if dead:
                await trio.to_thread.run_sync(storage.logs.remove_logs, dead)
                for log_id in dead:
                    storage.index.forget_log(log_id)
                log.info("GC: removed entry logs %s", dead)
            result.logs_removed = dead
        self.runs += 1
        return result

    def live_fraction(self, log_id: int) -> float:
        usage = self.storage.index.log_usage.get(log_id)
        total = self.storage.logs.log_size(log_id) - FILE_HEADER_SIZE
        if not usage or total <= 0:
            return 0.0
        return min(1.0, sum(usage.values()) / total)

    async def compact(self, threshold: float) -> CompactionResult:
        """Compact every log (except the one being written) whose live fraction < threshold.

        The copy runs without the checkpoint lock (adds and checkpoints go on); only the index
        update and the removal of the old log take it.
        """
        storage = self.storage
        result = CompactionResult()
        on_disk = await trio.to_thread.run_sync(storage.logs.log_ids)
        for log_id in on_disk:
            if log_id == storage.writer.current_log_id or storage.logs.is_protected(log_id):
                continue
            if not storage.index.log_usage.get(log_id):
                continue  # dead: plain GC removes it
            fraction = await trio.to_thread.run_sync(self.live_fraction, log_id)
            if fraction >= threshold:
                continue
            try:
                moved, nbytes = await self._compact_log(log_id)
            except (EntryLogCorruptError, FileNotFoundError) as exc:
                log.error("compaction of entry log %d skipped: %r", log_id, exc)
                continue
            result.logs_compacted.append(log_id)
            result.entries_moved += moved
            result.bytes_moved += nbytes
            log.info(
                "compacted entry log %d (%.0f%% live): moved %d entries",
                log_id,
                fraction * 100,
                moved,
            )
        return result

    async def _compact_log(self, log_id: int) -> tuple[int, int]:
        storage = self.storage
        index = storage.index
        rows: list[tuple[int, int, int, int]] = []  # old location, ledger, entry, size
        for ledger_id in list(index.log_usage.get(log_id, {})):
            idx = index.ledger(ledger_id)
            if idx is None:
                continue
            for entry_id, location, size in idx.items():
                if split_location(location)[0] == log_id:
                    rows.append((location, ledger_id, entry_id, size))
        rows.sort()
        writer = EntryLogWriter(
            storage.logs, max_bytes=storage.config.entry_log_max_bytes, protect=True
        )
        try:
            new_locations = await trio.to_thread.run_sync(self._copy_blocking, writer, rows)
            crash_point("compaction.after_copy")
            async with storage.checkpoint_lock:
                moved = await self._switch_index(rows, new_locations)
                crash_point("compaction.after_index_update")
                if not index.log_usage.get(log_id):
                    await trio.to_thread.run_sync(storage.logs.remove_logs, [log_id])
                    index.forget_log(log_id)
        finally:
            storage.logs.unprotect(writer.log_ids_written)
        return moved, sum(r[3] for r in rows)

    async def _switch_index(
        self, rows: list[tuple[int, int, int, int]], new_locations: list[int]
    ) -> int:
        """Point the index at the copies: durably first, then in memory, compare-and-set."""
        index = self.storage.index
        batch: dict[int, list[tuple[int, int, int]]] = {}
        olds: dict[tuple[int, int], int] = {}
        for (old, ledger_id, entry_id, size), new in zip(rows, new_locations, strict=True):
            current = index.get(ledger_id, entry_id)
            if current is not None and current[0] == old:
                batch.setdefault(ledger_id, []).append((entry_id, new, size))
                olds[(ledger_id, entry_id)] = old
        if batch:
            record = encode_index_record(REC_LOCATIONS, index.encode_locations(batch))
            await trio.to_thread.run_sync(self.storage.index_log.append, [record])
        moved = 0
        for ledger_id, moved_rows in batch.items():
            for entry_id, new, size in moved_rows:
                old = olds[(ledger_id, entry_id)]
                if index.compare_and_set(ledger_id, entry_id, old, new, size):
                    moved += 1
        return moved

    def _copy_blocking(
        self, writer: EntryLogWriter, rows: list[tuple[int, int, int, int]]
    ) -> list[int]:
        """Copy entries into a fresh log (or several), fsync it, return the new locations."""
        logs = self.storage.logs
        locations: list[int] = []
        try:
            chunk: list[tuple[int, int, bytes]] = []
            chunk_bytes = 0
            for location, ledger_id, entry_id, size in rows:
                chunk.append(
                    (ledger_id, entry_id, logs.read_entry(location, size, ledger_id, entry_id))
                )
                chunk_bytes += size
                if chunk_bytes >= COPY_CHUNK_BYTES:
                    locations.extend(writer.write(chunk))
                    chunk, chunk_bytes = [], 0
            if chunk:
                locations.extend(writer.write(chunk))
        finally:
            writer.close()  # fsyncs what was written
        return locations
