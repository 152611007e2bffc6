"""Entry logs: big append-only files holding the entries of many ledgers, interleaved.

Files are ``ledgers/entrylogs/<id as 8 hex digits>.log``, starting with the 16-byte file header
(magic ``LWEL``, version 1, log id); a new file is fsynced together with its directory.  Each
record is a 28-byte header then the payload:

    u32 payload length | u32 CRC-32C | u8 format version | u8 type | u16 reserved |
    u64 ledger id | i64 entry id | payload

The CRC covers the length and everything after the CRC field.  An entry's location is
``log_id << 32 | offset of its record header``, so a log is capped at 4 GiB.  Writers receive
entries already sorted per ledger (the write cache sorts them at flush), which keeps one
ledger's entries contiguous and makes read-ahead a single pread.

Everything here is blocking and runs in worker threads.  Readers and writers may work on the
same file at once; a removed log's descriptor is closed only when no reader uses it.  This
module must never hand out a location before the bytes behind it are written, and never
return bytes whose CRC or (ledger, entry) does not match.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

from .file_format import (
    FILE_HEADER_SIZE,
    BadFileError,
    check_file_header,
    crc32c_of,
    create_file_with_header,
    fsync_dir,
    pack_file_header,
    write_all,
)

ENTRY_LOG_MAGIC = b"LWEL"
ENTRY_LOG_VERSION = 1
ENTRY_RECORD_VERSION = 1
ENTRY_RECORD_TYPE = 1
ENTRY_HEADER = struct.Struct(">IIBBHQq")
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # 28
MAX_LOG_BYTES = 1 << 32


class EntryLogCorruptError(Exception):
    """A stored record failed its CRC, version or identity check."""


def location_of(log_id: int, offset: int) -> int:
    return (log_id << 32) | offset


def split_location(location: int) -> tuple[int, int]:
    return location >> 32, location & 0xFFFFFFFF


def encode_entry_header(ledger_id: int, entry_id: int, payload: bytes) -> bytes:
    length = len(payload)
    unsigned = ENTRY_HEADER.pack(
        length, 0, ENTRY_RECORD_VERSION, ENTRY_RECORD_TYPE, 0, ledger_id, entry_id
    )
    crc = crc32c_of(unsigned[:4], unsigned[8:], payload)
    return unsigned[:4] + crc.to_bytes(4, "big") + unsigned[8:]


def decode_entry(raw: memoryview, ledger_id: int, entry_id: int) -> bytes:
    """Check one record (header + payload) and return its payload."""
    return bytes(checked_payload(raw, ledger_id, entry_id))


def checked_payload(raw: memoryview, ledger_id: int, entry_id: int) -> memoryview:
    """Check one record (header + payload) and return its payload as a view of `raw`."""
    if len(raw) < ENTRY_HEADER_SIZE:
        raise EntryLogCorruptError("short record header")
    length, crc, version, rtype, _r, found_ledger, found_entry = ENTRY_HEADER.unpack_from(raw)
    if version != ENTRY_RECORD_VERSION or rtype != ENTRY_RECORD_TYPE:
        raise EntryLogCorruptError(f"unknown record version {version} type {rtype}")
    if len(raw) < ENTRY_HEADER_SIZE + length:
        raise EntryLogCorruptError("short record payload")
    payload = raw[ENTRY_HEADER_SIZE : ENTRY_HEADER_SIZE + length]
    if crc32c_of(raw[:4], raw[8:ENTRY_HEADER_SIZE], payload) != crc:
        raise EntryLogCorruptError(f"CRC mismatch for ledger {found_ledger} entry {found_entry}")
    if (found_ledger, found_entry) != (ledger_id, entry_id):
        raise EntryLogCorruptError(
            f"expected ledger {ledger_id} entry {entry_id}, found {found_ledger}/{found_entry}"
        )
    return payload


class _Reader:
    __slots__ = ("fd", "users", "removed")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.removed = False


class EntryLogDirectory:
    """The set of entry logs: id allocation, shared read descriptors, removal."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.path = directory
        self.fsync = fsync
        directory.mkdir(parents=True, exist_ok=True)
        existing = self.log_ids()
        self._next_id = (max(existing) + 1) if existing else 1
        self._readers: dict[int, _Reader] = {}
        self._lock = threading.Lock()
        # logs being filled by compaction: not in the index yet, but not garbage either
        self._protected: set[int] = set()

    def protect(self, log_id: int) -> None:
        with self._lock:
            self._protected.add(log_id)

    def unprotect(self, log_ids: list[int]) -> None:
        with self._lock:
            self._protected.difference_update(log_ids)

    def is_protected(self, log_id: int) -> bool:
        with self._lock:
            return log_id in self._protected

    def file_of(self, log_id: int) -> Path:
        return self.path / f"{log_id:08x}.log"

    def log_ids(self) -> list[int]:
        ids = []
        for p in self.path.glob("*.log"):
            try:
                ids.append(int(p.stem, 16))
            except ValueError:
                continue
        return sorted(ids)

    def log_size(self, log_id: int) -> int:
        try:
            return self.file_of(log_id).stat().st_size
        except FileNotFoundError:
            return 0

    def allocate_id(self) -> int:
        with self._lock:
            log_id = self._next_id
            self._next_id += 1
        return log_id

    def _acquire(self, log_id: int) -> _Reader:
        with self._lock:
            reader = self._readers.get(log_id)
            if reader is None or reader.removed:
                fd = os.open(self.file_of(log_id), os.O_RDONLY)
                try:
                    check_file_header(
                        os.pread(fd, FILE_HEADER_SIZE, 0), ENTRY_LOG_MAGIC, ENTRY_LOG_VERSION
                    )
                except BadFileError:
                    os.close(fd)
                    raise
                reader = _Reader(fd)
                self._readers[log_id] = reader
            reader.users += 1
            return reader

    def _release(self, reader: _Reader) -> None:
        with self._lock:
            reader.users -= 1
            if reader.removed and reader.users == 0:
                os.close(reader.fd)

    def read_span(self, log_id: int, offset: int, length: int) -> bytes:
        reader = self._acquire(log_id)
        try:
            data = os.pread(reader.fd, length, offset)
        finally:
            self._release(reader)
        return data

    def read_run(
        self, log_id: int, offset: int, ledger_id: int, run: list[tuple[int, int]]
    ) -> list[bytes]:
        """Read contiguous records of one ledger ((entry id, payload size) each, in file order)
        with one pread and check each (CRC, version, identity); blocking, so the checks run in
        the worker thread too.  EntryLogCorruptError on the first bad record."""
        total = sum(ENTRY_HEADER_SIZE + size for _eid, size in run)
        raw = memoryview(self.read_span(log_id, offset, total))
        out: list[bytes] = []
        pos = 0
        for entry_id, size in run:
            out.append(decode_entry(raw[pos : pos + ENTRY_HEADER_SIZE + size], ledger_id, entry_id))
            pos += ENTRY_HEADER_SIZE + size
        return out

    def read_run_views(
        self, log_id: int, offset: int, ledger_id: int, run: list[tuple[int, int]]
    ) -> list[memoryview]:
        """As read_run, but the payloads are views of the one buffer read (no copies; they keep
        it alive), for answers sent at once, never for a cache; and a bad record after the
        first ends the list before it (EntryLogCorruptError only for the first)."""
        total = sum(ENTRY_HEADER_SIZE + size for _eid, size in run)
        raw = memoryview(self.read_span(log_id, offset, total))
        out: list[memoryview] = []
        pos = 0
        for entry_id, size in run:
            end = pos + ENTRY_HEADER_SIZE + size
            try:
                out.append(checked_payload(raw[pos:end], ledger_id, entry_id))
            except EntryLogCorruptError:
                if not out:
                    raise
                break
            pos = end
        return out

    def read_entry(self, location: int, size: int, ledger_id: int, entry_id: int) -> bytes:
        log_id, offset = split_location(location)
        raw = self.read_span(log_id, offset, ENTRY_HEADER_SIZE + size)
        return decode_entry(memoryview(raw), ledger_id, entry_id)

    def remove_logs(self, log_ids: list[int]) -> None:
        for log_id in log_ids:
            self.file_of(log_id).unlink(missing_ok=True)
            with self._lock:
                reader = self._readers.pop(log_id, None)
                if reader is not None:
                    reader.removed = True
                    if reader.users == 0:
                        os.close(reader.fd)
        if self.fsync and log_ids:
            fsync_dir(self.path)

    def close(self) -> None:
        with self._lock:
            for reader in self._readers.values():
                reader.removed = True
                if reader.users == 0:
                    os.close(reader.fd)
            self._readers.clear()


class EntryLogWriter:
    """Appends sorted entries to a current log, rolling over at max_bytes; blocking."""

    def __init__(self, logs: EntryLogDirectory, *, max_bytes: int, protect: bool = False) -> None:
        self._logs = logs
        self._protect = protect
        self.log_ids_written: list[int] = []
        self._max_bytes = min(max_bytes, MAX_LOG_BYTES)
        self._fd = -1
        self.log_id = -1
        self._size = 0
        self._unsynced: list[int] = []  # fds of rolled-over logs still to fsync, then close

    @property
    def current_log_id(self) -> int:
        return self.log_id

    def _roll(self) -> None:
        if self._fd >= 0:
            self._unsynced.append(self._fd)
            self._fd = -1
        self.log_id = self._logs.allocate_id()
        self.log_ids_written.append(self.log_id)
        if self._protect:
            self._logs.protect(self.log_id)
        header = pack_file_header(ENTRY_LOG_MAGIC, ENTRY_LOG_VERSION, self.log_id)
        self._fd = create_file_with_header(
            self._logs.file_of(self.log_id), header, fsync=self._logs.fsync
        )
        self._size = FILE_HEADER_SIZE

    def write(self, entries: list[tuple[int, int, bytes]]) -> list[int]:
        """Append (ledger, entry, payload) records; return their locations (not yet fsynced)."""
        locations: list[int] = []
        buffers: list[bytes] = []
        pending = 0
        for ledger_id, entry_id, payload in entries:
            need = ENTRY_HEADER_SIZE + len(payload)
            if self._fd < 0 or (
                self._size + pending + need > self._max_bytes
                and self._size + pending > FILE_HEADER_SIZE
            ):
                if buffers:
                    write_all(self._fd, buffers, self._size)
                    self._size += pending
                    buffers, pending = [], 0
                self._roll()
            locations.append(location_of(self.log_id, self._size + pending))
            buffers.append(encode_entry_header(ledger_id, entry_id, payload))
            buffers.append(payload)
            pending += need
        if buffers:
            write_all(self._fd, buffers, self._size)
            self._size += pending
        return locations

    def sync(self) -> None:
        """fsync every log written since the last sync (rolled-over ones are then closed)."""
        for fd in self._unsynced:
            if self._logs.fsync:
                os.fdatasync(fd)
            os.close(fd)
        self._unsynced.clear()
        if self._fd >= 0 and self._logs.fsync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        self.sync()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
