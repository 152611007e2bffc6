"""The entry-location index: (ledger, entry) -> (entry-log location, size), and its index log.

Choice and why: an append-only *index log* with an in-memory index rebuilt at start.
  * A checkpoint appends one batch (new locations, changed ledger states, deleted ledgers) with
    one write and one fsync — sequential I/O, no per-entry syscalls, no B-tree rewrites.  sqlite
    would cost a transaction plus its own journal fsyncs per checkpoint and a Python round trip
    per row; per-ledger index files would cost one fsync per ledger per checkpoint.
  * In memory each ledger is two typed arrays indexed by ``entry_id - base`` (8-byte location,
    4-byte size), i.e. ~12 bytes per entry instead of ~100 for a dict, and lookups are O(1).
  * Start-up reads the log once; batches are array dumps, so that is a memcpy-speed scan.
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
import os
import struct
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .entry_log import ENTRY_HEADER_SIZE, split_location
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
from .ledger_state import LedgerState, decode_states, encode_states

log = logging.getLogger(__name__)

INDEX_MAGIC = b"LWIX"
INDEX_FILE_VERSION = 1
INDEX_RECORD_VERSION = 1
INDEX_RECORD = struct.Struct("<IIBBH")
INDEX_RECORD_SIZE = INDEX_RECORD.size  # 12
LEDGER_BLOCK = struct.Struct("<QI")  # ledger id, count; then count*(i64 entry, i64 loc, i64 size)
REC_LOCATIONS = 1
REC_STATES = 2
REC_DELETES = 3
REC_BATCH = 4  # the records of one checkpoint, so that an append is one record
_RECORD_TYPES = (REC_LOCATIONS, REC_STATES, REC_DELETES, REC_BATCH)
_LITTLE = sys.byteorder == "little"


def _arr(typecode: str, raw: bytes | memoryview) -> array:
    a = array(typecode)
    a.frombytes(raw)
    if not _LITTLE:
        a.byteswap()
    return a


def _raw(a: array) -> bytes:
    if not _LITTLE:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


class IndexLogCorruptError(Exception):
    """A bad record in the middle of the index log: checkpointed state is damaged."""


class LedgerEntryIndex:
    """Locations of one ledger's entries: arrays covering entry ids [base, base + len)."""

    __slots__ = ("base", "locs", "sizes", "count")

    def __init__(self) -> None:
        self.base = -1
        self.locs = array("q")
        self.sizes = array("I")
        self.count = 0

    def get(self, entry_id: int) -> tuple[int, int] | None:
        i = entry_id - self.base
        if self.base < 0 or i < 0 or i >= len(self.locs):
            return None
        loc = self.locs[i]
        return None if loc < 0 else (loc, self.sizes[i])

    def set(self, entry_id: int, location: int, size: int) -> tuple[int, int] | None:
        if self.base < 0:
            self.base = entry_id
        if entry_id < self.base:
            grow = self.base - entry_id
            self.locs[0:0] = array("q", [-1]) * grow
            self.sizes[0:0] = array("I", [0]) * grow
            self.base = entry_id
        i = entry_id - self.base
        if i >= len(self.locs):
            grow = i + 1 - len(self.locs)
            self.locs.extend(array("q", [-1]) * grow)
            self.sizes.extend(array("I", [0]) * grow)
        old, old_size = self.locs[i], self.sizes[i]
        self.locs[i] = location
        self.sizes[i] = size
        if old < 0:
            self.count += 1
            return None
        return old, old_size

    def max_entry_id(self) -> int:
        for i in range(len(self.locs) - 1, -1, -1):
            if self.locs[i] >= 0:
                return self.base + i
        return -1

    def items(self) -> Iterator[tuple[int, int, int]]:
        for i, loc in enumerate(self.locs):
            if loc >= 0:
                yield self.base + i, loc, self.sizes[i]


class EntryIndex:
    """The in-memory index plus per-entry-log byte accounting (ledger -> bytes per log)."""

    def __init__(self) -> None:
        self._ledgers: dict[int, LedgerEntryIndex] = {}
        self.log_usage: dict[int, dict[int, int]] = {}  # log id -> ledger id -> record bytes
        self.entry_count = 0

    def get(self, ledger_id: int, entry_id: int) -> tuple[int, int] | None:
        idx = self._ledgers.get(ledger_id)
        return None if idx is None else idx.get(entry_id)

    def ledger(self, ledger_id: int) -> LedgerEntryIndex | None:
        return self._ledgers.get(ledger_id)

    def ledger_ids(self) -> list[int]:
        return list(self._ledgers)

    def _account(self, location: int, ledger_id: int, delta: int) -> None:
        log_id = split_location(location)[0]
        usage = self.log_usage.setdefault(log_id, {})
        left = usage.get(ledger_id, 0) + delta
        if left > 0:
            usage[ledger_id] = left
        else:
            usage.pop(ledger_id, None)

    def set(self, ledger_id: int, entry_id: int, location: int, size: int) -> None:
        idx = self._ledgers.get(ledger_id)
        if idx is None:
            idx = self._ledgers[ledger_id] = LedgerEntryIndex()
        old = idx.set(entry_id, location, size)
        if old is None:
            self.entry_count += 1
        else:
            self._account(old[0], ledger_id, -(old[1] + ENTRY_HEADER_SIZE))
        self._account(location, ledger_id, size + ENTRY_HEADER_SIZE)

    def compare_and_set(
        self, ledger_id: int, entry_id: int, expected: int, location: int, size: int
    ) -> bool:
        """Move an entry (compaction) only if nobody rewrote it meanwhile."""
        current = self.get(ledger_id, entry_id)
        if current is None or current[0] != expected:
            return False
        self.set(ledger_id, entry_id, location, size)
        return True

    def delete_ledger(self, ledger_id: int) -> None:
        idx = self._ledgers.pop(ledger_id, None)
        if idx is None:
            return
        self.entry_count -= idx.count
        for usage in self.log_usage.values():
            usage.pop(ledger_id, None)

    def forget_log(self, log_id: int) -> None:
        self.log_usage.pop(log_id, None)

    def encode_locations(self, batch: dict[int, list[tuple[int, int, int]]]) -> bytes:
        parts = []
        for ledger_id, rows in batch.items():
            parts.append(LEDGER_BLOCK.pack(ledger_id, len(rows)))
            parts.append(_raw(array("q", [r[0] for r in rows])))
            parts.append(_raw(array("q", [r[1] for r in rows])))
            parts.append(_raw(array("q", [r[2] for r in rows])))
        return b"".join(parts)

    def snapshot_locations(self) -> Iterator[bytes]:
        """Location bodies of the whole index, in chunks of about 4 MiB."""
        batch: dict[int, list[tuple[int, int, int]]] = {}
        rows = 0
        for ledger_id, idx in self._ledgers.items():
            batch[ledger_id] = list(idx.items())
            rows += len(batch[ledger_id])
            if rows >= 170_000:
                yield self.encode_locations(batch)
                batch, rows = {}, 0
        if batch:
            yield self.encode_locations(batch)

    def apply_locations(self, body: memoryview) -> None:
        pos = 0
        while pos < len(body):
            ledger_id, count = LEDGER_BLOCK.unpack_from(body, pos)
            pos += LEDGER_BLOCK.size
            width = 8 * count
            entries = _arr("q", body[pos : pos + width])
            locs = _arr("q", body[pos + width : pos + 2 * width])
            sizes = _arr("q", body[pos + 2 * width : pos + 3 * width])
            if len(sizes) != count:
                raise ValueError("truncated location block")
            pos += 3 * width
            for e, loc, size in zip(entries, locs, sizes, strict=True):
                self.set(ledger_id, e, loc, size)


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
        pos, stop = FILE_HEADER_SIZE, None
        with path.open("rb") as f:
            check_file_header(f.read(FILE_HEADER_SIZE), INDEX_MAGIC, INDEX_FILE_VERSION)
            file_size = os.fstat(f.fileno()).st_size
            while pos < file_size:
                head = f.read(INDEX_RECORD_SIZE)
                end = file_size + 1
                if len(head) < INDEX_RECORD_SIZE:
                    problem: str | None = "torn record header"
                else:
                    length = INDEX_RECORD.unpack_from(head)[0]
                    end = pos + INDEX_RECORD_SIZE + length
                    body = f.read(length) if end <= file_size else b""
                    problem = "torn record" if end > file_size else _check_record(head, body)
                if problem is not None:
                    if end < file_size and not _only_zeros(f, pos, file_size):
                        raise IndexLogCorruptError(
                            f"index log {path}: {problem} at offset {pos}, "
                            f"{file_size - end} bytes of records after it"
                        )
                    stop = problem
                    break
                _apply_record(head, memoryview(body), index, states)
                pos = end
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


def _check_record(head: bytes, body: bytes) -> str | None:
    _length, crc, version, rec_type, _r = INDEX_RECORD.unpack_from(head)
    if crc32c_of(head[:4], head[8:], body) != crc:
        return "CRC mismatch"
    if version != INDEX_RECORD_VERSION or rec_type not in _RECORD_TYPES:
        return f"unknown record version {version} type {rec_type}"
    return None


def _apply_record(
    head: bytes, body: memoryview, index: EntryIndex, states: dict[int, LedgerState]
) -> None:
    rec_type = INDEX_RECORD.unpack_from(head)[3]
    if rec_type == REC_LOCATIONS:
        index.apply_locations(body)
    elif rec_type == REC_STATES:
        states.update(decode_states(body))
    elif rec_type == REC_DELETES:
        for ledger_id in _arr("q", body):
            index.delete_ledger(ledger_id)
    else:  # REC_BATCH: whole records, checked by the batch's CRC and again one by one
        pos = 0
        while pos < len(body):
            inner_head = bytes(body[pos : pos + INDEX_RECORD_SIZE])
            length = INDEX_RECORD.unpack_from(inner_head)[0] if len(inner_head) == 12 else -1
            inner = bytes(body[pos + INDEX_RECORD_SIZE : pos + INDEX_RECORD_SIZE + length])
            if length < 0 or len(inner) != length or _check_record(inner_head, inner) is not None:
                raise IndexLogCorruptError(f"bad record inside a batch at {pos}")
            if INDEX_RECORD.unpack_from(inner_head)[3] == REC_BATCH:
                raise IndexLogCorruptError("nested batch record")
            _apply_record(inner_head, memoryview(inner), index, states)
            pos += INDEX_RECORD_SIZE + length


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
    """
    gens = sorted(int(p.stem, 16) for p in directory.glob("*.idx")) if directory.is_dir() else []
    if not gens:
        return None, 0, None
    path = directory / f"{gens[-1]:08x}.idx"
    data = path.read_bytes()
    check_file_header(data[:FILE_HEADER_SIZE], INDEX_MAGIC, INDEX_FILE_VERSION)
    pos = FILE_HEADER_SIZE
    while pos < len(data):
        if pos + INDEX_RECORD_SIZE > len(data):
            return path, pos, "torn record header"
        head = data[pos : pos + INDEX_RECORD_SIZE]
        end = pos + INDEX_RECORD_SIZE + INDEX_RECORD.unpack_from(head)[0]
        if end > len(data):
            return path, pos, "torn record"
        body = data[pos + INDEX_RECORD_SIZE : end]
        problem = _check_record(head, body)
        if problem is not None:
            return path, pos, problem
        _apply_record(head, memoryview(body), index, states)
        pos = end
    return path, pos, None


def _only_zeros(f: BinaryIO, start: int, end: int) -> bool:
    f.seek(start)
    while start < end:
        chunk = f.read(min(1 << 20, end - start))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        start += len(chunk)
    return True


def encode_deletes(ledger_ids: list[int]) -> bytes:
    return encode_index_record(REC_DELETES, _raw(array("q", ledger_ids)))


def encode_state_record(states: list[tuple[int, LedgerState]]) -> bytes:
    return encode_index_record(REC_STATES, encode_states(states))


__all__ = [
    "BadFileError",
    "EntryIndex",
    "IndexLog",
    "LedgerEntryIndex",
    "REC_LOCATIONS",
    "encode_deletes",
    "encode_index_record",
    "encode_state_record",
]
