"""The entry-location index: (ledger, entry) -> (entry-log location, size), and its index log.

Choice and why: an append-only *index log* with an in-memory index rebuilt at start.
  * A checkpoint appends one batch (new locations, changed ledger states, deleted ledgers) with
    one write and one fsync — sequential I/O, no per-entry syscalls, no B-tree rewrites.  sqlite
    would cost a transaction plus its own journal fsyncs per checkpoint and a Python round trip
    per row; per-ledger index files would cost one fsync per ledger per checkpoint.
  * In memory each ledger is two typed arrays indexed by ``entry_id - base`` (8-byte location,
    4-byte size), i.e. ~12 bytes per entry instead of ~100 for a dict, and lookups are O(1)
    (``location_index.py``, which also owns the location blocks' layout).
  * Start-up maps the log and reads it once: it checks every record in order (CRCs, the torn
    tail rule below), applies ledger states (the newest per ledger) and deletes as it goes, and
    only notes where each ledger's location blocks are; then each ledger's arrays are built in
    bulk from its blocks (``LocationBlockLoader``), skipping ledgers deleted later in the log.
    That is ~20x faster than an ``EntryIndex.set`` per entry (benchmarks/bench_bookie_startup.py)
    and gives the same index; the file format is unchanged.
  * The log is rewritten as a snapshot (temp file, fsync, rename, dir fsync) when it grows
    ``index_log_rewrite_ratio`` times past its live content, so deletes and compactions do
    not make it grow forever.
The index also keeps, per entry log, the bytes each ledger holds there: GC and compaction
use it to find dead and mostly-dead logs without scanning them.

Index-log file ``ledgers/index/<generation>.idx``: file header (magic ``LWIX``, version 1) then
records ``u32 body length | u32 CRC-32C | u8 version | u8 type | u16 reserved | body``; each
append (one checkpoint) is a single record, a BATCH when it holds several.  Load stops at the
first bad record: at the tail (incomplete, or followed only by zeros) it is a torn append whose
mark was never persisted — the journal still holds it all — and it is cut away (logged); a bad
record with good data after it is damage to checkpointed state and start-up refuses it.

This module must never let a location into the index before its entry-log bytes are fsynced
(the caller's checkpoint order guarantees that) and never do blocking I/O on the Trio thread
(``IndexLog`` methods are blocking and run in worker threads).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from array import array
from operator import itemgetter
from pathlib import Path

from .file_format import (
    FILE_HEADER_SIZE,
    BadFileError,
    atomic_write_file,
    check_file_header,
    crc32c_of,
    fsync_dir,
    pack_file_header,
    write_all,
)
from .ledger_state import (
    FLAG_DELETED,
    FLAG_FENCED,
    STATE_RECORD,
    LedgerState,
    encode_states,
)
from .location_index import (
    LEDGER_BLOCK,
    EntryIndex,
    LedgerEntryIndex,
    LocationBlockLoader,
    array_from_le,
    array_to_le,
)

log = logging.getLogger(__name__)

INDEX_MAGIC = b"LWIX"
INDEX_FILE_VERSION = 1
INDEX_RECORD_VERSION = 1
INDEX_RECORD = struct.Struct("<IIBBH")
INDEX_RECORD_SIZE = INDEX_RECORD.size  # 12
REC_LOCATIONS = 1
REC_STATES = 2
REC_DELETES = 3
REC_BATCH = 4  # the records of one checkpoint, so that an append is one record
_RECORD_TYPES = (REC_LOCATIONS, REC_STATES, REC_DELETES, REC_BATCH)


class IndexLogCorruptError(Exception):
    """A bad record in the middle of the index log: checkpointed state is damaged."""


def encode_index_record(rec_type: int, body: bytes) -> bytes:
    unsigned = INDEX_RECORD.pack(len(body), 0, INDEX_RECORD_VERSION, rec_type, 0)
    crc = crc32c_of(unsigned[:4], unsigned[8:], body)
    return unsigned[:4] + crc.to_bytes(4, "little") + unsigned[8:] + body


class IndexLog:
    """The durable side of the index; every method is blocking (run in a worker thread)."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.path = directory
        self.fsync = fsync
        directory.mkdir(parents=True, exist_ok=True)
        self.generation = 0
        self.size = 0
        self._fd = -1
        self._broken = False

    def _file(self, generation: int) -> Path:
        return self.path / f"{generation:08x}.idx"

    def load(self, index: EntryIndex, states: dict[int, LedgerState]) -> str | None:
        """Rebuild index and states from the newest generation; return a stop reason if torn.

        A bad record at the end of the file (incomplete, running past the end, or followed
        only by zeros) is a torn append: it is cut away.  A bad record with good data after it
        is corruption of checkpointed state: IndexLogCorruptError, never a silent truncation.
        """
        for tmp in self.path.glob("*.tmp"):
            tmp.unlink()
        gens = sorted(int(p.stem, 16) for p in self.path.glob("*.idx"))
        if not gens:
            self._start_generation(1, [])
            return None
        self.generation = gens[-1]
        for old in gens[:-1]:  # a rewrite that died between rename and unlink
            self._file(old).unlink()
        path = self._file(self.generation)
        with path.open("rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size < FILE_HEADER_SIZE:
                check_file_header(f.read(FILE_HEADER_SIZE), INDEX_MAGIC, INDEX_FILE_VERSION)
            # mapped, not read: a large log costs page cache, not a copy on the heap
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buffer = memoryview(mapped)
        try:
            header = buffer[:FILE_HEADER_SIZE].tobytes()
            check_file_header(header, INDEX_MAGIC, INDEX_FILE_VERSION)
            records = _IndexRecords(buffer, index, states)
            pos, stop, end = records.scan(file_size)
            if stop is not None and end < file_size and not _only_zeros(buffer, pos):
                raise IndexLogCorruptError(
                    f"index log {path}: {stop} at offset {pos}, "
                    f"{file_size - end} bytes of records after it"
                )
            records.finish()
            del records
        finally:
            _unmap_quietly(buffer, mapped)
        self._fd = os.open(path, os.O_RDWR)
        if stop is not None:
            log.warning("index log %s: torn tail at offset %d (%s); truncated", path, pos, stop)
            os.ftruncate(self._fd, pos)
            if self.fsync:
                os.fsync(self._fd)
        self.size = pos
        return stop

    def append(self, records: list[bytes]) -> None:
        """Append the records as one (batch) record with one write and one fsync."""
        if not records:
            return
        if self._broken:
            raise OSError("index log unusable after a failed append; restart the bookie")
        record = (
            records[0] if len(records) == 1 else encode_index_record(REC_BATCH, b"".join(records))
        )
        try:
            write_all(self._fd, [record], self.size)
            if self.fsync:
                os.fdatasync(self._fd)
        except BaseException:
            # after a failed write or fsync the file state is unknown: no append may follow
            # (start-up cuts a torn tail away)
            self._broken = True
            raise
        self.size += len(record)

    def _start_generation(self, generation: int, records: list[bytes]) -> None:
        header = pack_file_header(INDEX_MAGIC, INDEX_FILE_VERSION, generation)
        atomic_write_file(self._file(generation), header + b"".join(records), fsync=self.fsync)
        old_fd, old_gen = self._fd, self.generation
        self._fd = os.open(self._file(generation), os.O_RDWR)
        self.size = os.lseek(self._fd, 0, os.SEEK_END)
        self.generation = generation
        if old_fd >= 0:
            os.close(old_fd)
            self._file(old_gen).unlink(missing_ok=True)
            if self.fsync:
                fsync_dir(self.path)

    def rewrite(self, records: list[bytes]) -> None:
        """Replace the log by a snapshot made of ``records`` (a new generation)."""
        self._start_generation(self.generation + 1, records)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _check_record(head: bytes | memoryview, body: bytes | memoryview) -> str | None:
    _length, crc, version, rec_type, _r = INDEX_RECORD.unpack_from(head)
    if crc32c_of(head[:4], head[8:], body) != crc:
        return "CRC mismatch"
    if version != INDEX_RECORD_VERSION or rec_type not in _RECORD_TYPES:
        return f"unknown record version {version} type {rec_type}"
    return None


class _IndexRecords:
    """Checks the records of an index-log image in order and applies them: ledger states and
    deletes at once, locations noted per ledger and built in bulk by ``finish``."""

    def __init__(
        self, buffer: memoryview, index: EntryIndex, states: dict[int, LedgerState]
    ) -> None:
        self._buffer = buffer
        self._states = states
        self._state_rows: dict[int, tuple[int, int, int, int]] = {}  # the newest per ledger
        self._locations = LocationBlockLoader(index, buffer)

    def scan(self, size: int) -> tuple[int, str | None, int]:
        """Walk the records after the file header up to the first bad one; return (where
        reading stopped, why or None, end of the bad record or size + 1 if it runs past)."""
        buffer, pos = self._buffer, FILE_HEADER_SIZE
        while pos < size:
            if pos + INDEX_RECORD_SIZE > size:
                return pos, "torn record header", size + 1
            head = buffer[pos : pos + INDEX_RECORD_SIZE]
            end = pos + INDEX_RECORD_SIZE + INDEX_RECORD.unpack_from(head)[0]
            if end > size:
                return pos, "torn record", size + 1
            problem = _check_record(head, buffer[pos + INDEX_RECORD_SIZE : end])
            if problem is not None:
                return pos, problem, end
            self._apply(INDEX_RECORD.unpack_from(head)[3], pos + INDEX_RECORD_SIZE, end)
            pos = end
        return pos, None, pos

    def finish(self) -> None:
        """Apply what the scan collected: the newest state of each ledger, the locations."""
        self._states.update(
            (ledger, LedgerState(bool(flags & FLAG_FENCED), bool(flags & FLAG_DELETED), lac, last))
            for ledger, flags, lac, last in self._state_rows.values()
        )
        self._state_rows.clear()
        self._locations.finish()

    def _apply(self, rec_type: int, start: int, end: int) -> None:
        buffer = self._buffer
        if rec_type == REC_LOCATIONS:
            self._locations.add_blocks(start, end)
        elif rec_type == REC_STATES:
            if (end - start) % STATE_RECORD.size:
                raise ValueError("ledger state body is not a whole number of records")
            rows = list(STATE_RECORD.iter_unpack(buffer[start:end]))
            self._state_rows.update(zip(map(itemgetter(0), rows), rows, strict=True))
        elif rec_type == REC_DELETES:
            self._locations.delete_ledgers(array_from_le("q", buffer[start:end]))
        else:  # REC_BATCH: whole records, checked by the batch's CRC and again one by one
            pos = start
            while pos < end:
                inner_head = buffer[pos : min(end, pos + INDEX_RECORD_SIZE)]
                inner_end = end + 1
                if len(inner_head) == INDEX_RECORD_SIZE:
                    inner_end = pos + INDEX_RECORD_SIZE + INDEX_RECORD.unpack_from(inner_head)[0]
                if inner_end > end or _check_record(
                    inner_head, buffer[pos + INDEX_RECORD_SIZE : inner_end]
                ) is not None:
                    raise IndexLogCorruptError(f"bad record inside a batch at {pos - start}")
                inner_type = INDEX_RECORD.unpack_from(inner_head)[3]
                if inner_type == REC_BATCH:
                    raise IndexLogCorruptError("nested batch record")
                self._apply(inner_type, pos + INDEX_RECORD_SIZE, inner_end)
                pos = inner_end


def read_index_log_readonly(
    directory: Path, index: EntryIndex, states: dict[int, LedgerState]
) -> tuple[Path | None, int, str | None]:
    """Apply the newest index generation in ``directory`` to ``index``/``states``, read-only.

    For tools reading a bookie's files beside (or instead of) the bookie, e.g. the Spark
    bridge's offline replay.  Records are checked and applied exactly as ``IndexLog.load`` does,
    up to the first bad one, but nothing is ever truncated, deleted or created (no torn-tail
    cut, no cleanup of old generations or temporary files), and a bad record is where reading
    stops rather than an error (a damaged record inside a batch whose own CRC is good still
    raises IndexLogCorruptError, as in ``load``).  Returns (the file read, or None when there is
    no generation; the offset where reading stopped; why it stopped early, or None).
    The file is read into memory, not mapped: a running bookie may cut its tail meanwhile.
    """
    gens = sorted(int(p.stem, 16) for p in directory.glob("*.idx")) if directory.is_dir() else []
    if not gens:
        return None, 0, None
    path = directory / f"{gens[-1]:08x}.idx"
    data = path.read_bytes()
    check_file_header(data[:FILE_HEADER_SIZE], INDEX_MAGIC, INDEX_FILE_VERSION)
    records = _IndexRecords(memoryview(data), index, states)
    pos, problem, _end = records.scan(len(data))
    records.finish()
    return path, pos, problem


def _only_zeros(buffer: memoryview, start: int) -> bool:
    """Whether buffer[start:] holds nothing but zero bytes (a power loss's unwritten tail)."""
    for at in range(start, len(buffer), 1 << 20):
        chunk = buffer[at : at + (1 << 20)].tobytes()
        if chunk.count(0) != len(chunk):
            return False
    return True


def _unmap_quietly(buffer: memoryview, mapped: mmap.mmap) -> None:
    try:
        buffer.release()
        mapped.close()
    except BufferError:  # a view still alive in a traceback: the mapping goes with it
        pass


def encode_deletes(ledger_ids: list[int]) -> bytes:
    return encode_index_record(REC_DELETES, array_to_le(array("q", ledger_ids)))


def encode_state_record(states: list[tuple[int, LedgerState]]) -> bytes:
    return encode_index_record(REC_STATES, encode_states(states))


__all__ = [
    "LEDGER_BLOCK",
    "BadFileError",
    "EntryIndex",
    "IndexLog",
    "IndexLogCorruptError",
    "LedgerEntryIndex",
    "REC_DELETES",
    "REC_LOCATIONS",
    "REC_STATES",
    "read_index_log_readonly",
    "encode_deletes",
    "encode_index_record",
    "encode_state_record",
]
