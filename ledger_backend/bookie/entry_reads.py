"""The bookie's read path: entries from the write cache, the read cache, else the entry logs.

A miss reads a *run* — the entry and the ones lying right after it in the same entry log — with
one pread in one worker-thread hop, where every record's CRC, version and identity are checked
too; the checked payloads go to the read cache.  A single read brings up to read_ahead_entries;
a range read (`read_entries`) brings the rest of its range (up to MAX_RANGE_RUN_BYTES).
A batch read (`read_batch`, the wire's READ_ENTRIES) first sizes its answer from the caches and
the index, so it never reads more than the caller's byte budget (plus the first entry); what it
reads from the entry logs (checked the same way) is answered as views of the run read and
does not enter the read cache (a scan would evict the tail's entries).
Concurrent readers of one run share it: an entry being read right now is waited for, not read
again.  (A background read-ahead of the following range was measured and dropped: no gain in
throughput, more CPU, and with several partitions it thrashed the read cache.)

This module must never serve an entry that failed its checks, serve anything of a deleted
ledger, or write anything but the read cache.
"""

from __future__ import annotations

import trio

from .entry_index import EntryIndex
from .entry_log import ENTRY_HEADER_SIZE, EntryLogCorruptError, EntryLogDirectory, split_location
from .ledger_state import LedgerStateTable
from .read_cache import ReadCache
from .storage_api import BookieError, NoSuchEntryError, NoSuchLedgerError
from .write_cache import WriteCache

# A range read reads at most this much of an entry log in one worker-thread hop.
MAX_RANGE_RUN_BYTES = 16 << 20


class EntryReads:
    def __init__(
        self,
        states: LedgerStateTable,
        write_cache: WriteCache,
        read_cache: ReadCache,
        index: EntryIndex,
        logs: EntryLogDirectory,
        *,
        read_ahead_entries: int,
    ) -> None:
        self._states = states
        self._write_cache = write_cache
        self._read_cache = read_cache
        self._index = index
        self._logs = logs
        self._read_ahead = max(read_ahead_entries, 1)
        # entries being read from an entry log right now (as part of a run)
        self._in_flight: dict[tuple[int, int], trio.Event] = {}
        self.log_reads = 0  # misses that went to an entry log

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last, as `read_entry` returns them one by one; raises what it raises
        for the first entry that fails."""
        out: list[bytes] = []
        for entry_id in range(first, last + 1):
            out.append(await self.read_entry(ledger_id, entry_id, run_to=last))
        return out

    async def read_batch(self, ledger_id: int, first: int, max_entries: int,
                         max_bytes: int) -> list[bytes | memoryview]:  # fmt: skip
        """Entry `first` (raising what `read_entry` raises for it), then the consecutive entries
        after it that this bookie holds, while they fit `max_entries` and `max_bytes` in all.
        A later entry that fails ends the batch before it (the caller asks again for it).
        Entries not cached are read from the entry logs in runs (one pread each) and answered
        as views of the run read, without copies and WITHOUT entering the read cache: a batch
        read is a scan (an offload, a catch-up), which would only evict what readers of the
        tail use."""
        size = self._stored_size(ledger_id, first)
        if size is None:  # raises what read_entry raises (or it was written meanwhile)
            return [await self.read_entry(ledger_id, first)]
        total, last = size, first
        while last - first + 1 < max_entries:
            size = self._stored_size(ledger_id, last + 1)
            if size is None or total + size > max_bytes:
                break
            total += size
            last += 1
        out: list[bytes | memoryview] = []
        while first + len(out) <= last:
            entry_id = first + len(out)
            try:
                out.extend(await self._read_uncached(ledger_id, entry_id, last))
            except (BookieError, FileNotFoundError, EntryLogCorruptError):
                if out:
                    break  # the batch ends before it
                out.append(await self.read_entry(ledger_id, first))  # its error, or a retry
        return out

    async def _read_uncached(self, ledger_id: int, entry_id: int, last: int
                             ) -> list[bytes | memoryview]:  # fmt: skip
        """Entry `entry_id` from a cache, or it and the following ones up to `last` that lie
        right after it in the same entry log and are not cached (MAX_RANGE_RUN_BYTES at most),
        read and checked in one worker-thread hop, as views of that read."""
        data = self._cached(ledger_id, entry_id)
        if data is not None:
            return [data]
        if (ledger_id, entry_id) in self._in_flight:
            return [await self.read_entry(ledger_id, entry_id)]  # being read into the cache
        log_id, start, run = self._plan_run(ledger_id, entry_id, entry_id, last)
        self.log_reads += 1
        payloads = await trio.to_thread.run_sync(
            self._logs.read_run_views, log_id, start, ledger_id, run)  # fmt: skip
        state = self._states.get(ledger_id)
        if state is None or state.deleted:  # deleted while we read
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        return list(payloads)

    def _stored_size(self, ledger_id: int, entry_id: int) -> int | None:
        data = self._write_cache.get(ledger_id, entry_id)
        if data is None:
            data = self._read_cache.get(ledger_id, entry_id)
        if data is not None:
            return len(data)
        found = self._index.get(ledger_id, entry_id)
        return None if found is None else found[1]

    def _cached(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry from the write or read cache; NoSuchLedgerError for a deleted ledger."""
        state = self._states.get(ledger_id)
        if state is None or state.deleted:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        data = self._write_cache.get(ledger_id, entry_id)
        return data if data is not None else self._read_cache.get(ledger_id, entry_id)

    async def read_entry(self, ledger_id: int, entry_id: int, *, run_to: int = -1) -> bytes:
        moved = 0  # times compaction moved the entry while we read it
        while moved < 3:
            data = self._cached(ledger_id, entry_id)
            if data is not None:
                return data
            if self._index.get(ledger_id, entry_id) is None:
                raise NoSuchEntryError(f"no entry {entry_id} in ledger {ledger_id}")
            pending = self._in_flight.get((ledger_id, entry_id))
            if pending is not None:
                # Another read is already fetching this entry as part of its run: wait for it
                # and take the entry from the read cache, rather than read it again.
                await pending.wait()
                continue
            self.log_reads += 1
            try:
                return await self._read_run(ledger_id, entry_id, run_to)
            except FileNotFoundError:
                moved += 1
                continue  # compaction moved it while we read: look it up again
            except EntryLogCorruptError as exc:
                raise BookieError(f"ledger {ledger_id} entry {entry_id}: {exc}") from exc
        raise BookieError(f"ledger {ledger_id} entry {entry_id} kept moving while read")

    def _plan_run(self, ledger_id: int, entry_id: int, read_ahead_end: int, run_to: int
                  ) -> tuple[int, int, list[tuple[int, int]]]:  # fmt: skip
        """(entry log, offset, [(entry id, size)]) of the entry and the ones lying right after
        it in the same log, not cached nor being read: through `read_ahead_end`, and on
        through `run_to` within MAX_RANGE_RUN_BYTES."""
        idx = self._index.ledger(ledger_id)
        first = idx.get(entry_id) if idx is not None else None
        if idx is None or first is None:
            raise NoSuchEntryError(f"no entry {entry_id} in ledger {ledger_id}")
        log_id, start = split_location(first[0])
        run = [(entry_id, first[1])]
        end = start + ENTRY_HEADER_SIZE + first[1]
        for next_id in range(entry_id + 1, max(read_ahead_end, run_to) + 1):
            found = idx.get(next_id)
            if found is None or found[0] != ((log_id << 32) | end):
                break
            if next_id > read_ahead_end and end - start >= MAX_RANGE_RUN_BYTES:
                break
            if (ledger_id, next_id) in self._in_flight:
                break  # another read already brings it (and what follows)
            if self._read_cache.get(ledger_id, next_id) is not None:
                break
            run.append((next_id, found[1]))
            end += ENTRY_HEADER_SIZE + found[1]
        return log_id, start, run

    async def _read_run(self, ledger_id: int, entry_id: int, run_to: int) -> bytes:
        """Read the entry and the following ones lying right after it in the same entry log
        (read_ahead_entries, or through `run_to` within MAX_RANGE_RUN_BYTES); return the first."""
        log_id, start, run = self._plan_run(
            ledger_id, entry_id, entry_id + self._read_ahead - 1, run_to)  # fmt: skip
        done = trio.Event()
        keys = [(ledger_id, eid) for eid, _ in run]
        for key in keys:
            self._in_flight[key] = done
        try:
            # One worker-thread hop reads the run and checks every record off the Trio thread;
            # only checked payloads reach the read cache.
            payloads = await trio.to_thread.run_sync(
                self._logs.read_run, log_id, start, ledger_id, run
            )
            for (eid, _size), payload in zip(run, payloads, strict=True):
                self._read_cache.put(ledger_id, eid, payload)
            return payloads[0]
        finally:
            for key in keys:
                if self._in_flight.get(key) is done:
                    del self._in_flight[key]
            done.set()
