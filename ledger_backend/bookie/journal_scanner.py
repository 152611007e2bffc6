"""Reading the bookie journal back: records from a log mark forward, for replay.

``JournalScanner`` reads from a log mark forward and stops at the first record that is short,
fails its CRC or has an unknown version/type, reporting file, offset and reason.  A file that
ends exactly on a record boundary continues into the next file.  Bytes after a stop (a torn
tail, or the records of a later group written beside an earlier one that never reached the
disk) are never returned: none of them was acknowledged.

Zeroes: a preallocated file (journal.py) has zeroes after its last record, and a record is never
all zero (its version and type are not), so a zero record header whose bytes up to the end of
the file are all zero ends the file cleanly, exactly like the file's end would (the next file
follows, if any).  A zero header with any non-zero byte after it is a gap: a group that never
reached the disk while a later one did.  That later group was never acknowledged either (groups
are released strictly in start order, each only after every earlier one is fsynced), so the
scan stops there as at any bad record.  A torn record (its header or payload partly written,
then zeroes) fails its length or CRC check and stops the scan as before; one torn so early that
only zero bytes of it reached the disk is indistinguishable from, and as harmless as, the
preallocated tail.

This module must never write a journal file, and never return a record it has not checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

from .file_format import FILE_HEADER_SIZE, BadFileError, check_file_header
from .journal_format import (
    JOURNAL_FILE_VERSION,
    JOURNAL_MAGIC,
    MAX_RECORD_PAYLOAD,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RECORD_TYPES,
    RECORD_VERSION,
    JournalRecord,
    LogMark,
    journal_file_name,
    list_journal_files,
)


@dataclass
class ReplayStop:
    """Where replay ended and why (reason "end of journal" when nothing was wrong)."""

    file_id: int
    offset: int
    reason: str
    clean: bool


class JournalScanner:
    """Reads records from a mark onwards, in batches; blocking (run it in a worker thread)."""

    def __init__(self, directory: Path, start: LogMark) -> None:
        self._directory = directory
        self._files = [i for i in list_journal_files(directory) if i >= start.file_id]
        self._start = start
        self._handle: _Handle | None = None
        self.stop: ReplayStop | None = None
        self.position = start

    def next_batch(self, max_bytes: int = 8 << 20) -> list[tuple[JournalRecord, LogMark]]:
        """Up to ~max_bytes of records, each with the mark just after it; [] at the end."""
        out: list[tuple[JournalRecord, LogMark]] = []
        size = 0
        while self.stop is None and size < max_bytes:
            if self._handle is None and not self._open_next():
                break
            assert self._handle is not None
            item = self._read_one(self._handle)
            if item is None:
                continue
            out.append(item)
            size += len(item[0].payload) + RECORD_HEADER_SIZE
        return out

    def _open_next(self) -> bool:
        if not self._files:
            where = self.position
            self.stop = ReplayStop(where.file_id, where.offset, "end of journal", True)
            return False
        file_id = self._files.pop(0)
        path = self._directory / journal_file_name(file_id)
        data = path.open("rb")
        try:
            check_file_header(data.read(FILE_HEADER_SIZE), JOURNAL_MAGIC, JOURNAL_FILE_VERSION)
        except BadFileError as exc:
            data.close()
            self._finish(file_id, 0, f"bad file header: {exc}")
            return False
        offset = FILE_HEADER_SIZE
        if file_id == self._start.file_id and self._start.offset > FILE_HEADER_SIZE:
            offset = self._start.offset
            data.seek(offset)
        self._handle = _Handle(file_id, data, offset, os.fstat(data.fileno()).st_size)
        self.position = LogMark(file_id, offset)
        return True

    def _finish(self, file_id: int, offset: int, reason: str) -> None:
        self.stop = ReplayStop(file_id, offset, reason, False)
        if self._handle is not None:
            self._handle.file.close()
            self._handle = None

    def _read_one(self, h: _Handle) -> tuple[JournalRecord, LogMark] | None:
        if h.offset == h.size:  # clean end of this file: go on with the next one
            h.file.close()
            self._handle = None
            return None
        raw = h.file.read(RECORD_HEADER_SIZE)
        if not any(raw):
            nonzero = _first_nonzero(h.file, h.offset + len(raw))
            if nonzero is None:  # a zero-filled (preallocated) tail: the end of this file
                h.file.close()
                self._handle = None
                return None
            self._finish(h.file_id, h.offset,
                         f"zero gap before non-zero bytes at offset {nonzero}")
            return None
        if len(raw) < RECORD_HEADER_SIZE:
            self._finish(h.file_id, h.offset, f"torn record header ({len(raw)} bytes)")
            return None
        length, crc, version, rec_type, _r, ledger_id, entry_id, lac = RECORD_HEADER.unpack(raw)
        if length > MAX_RECORD_PAYLOAD:
            self._finish(h.file_id, h.offset, f"implausible record length {length}")
            return None
        payload = h.file.read(length) if length else b""
        if len(payload) < length:
            self._finish(h.file_id, h.offset, f"torn record ({len(payload)} of {length} bytes)")
            return None
        actual = crc32c.crc32c(raw[8:], crc32c.crc32c(raw[:4]))
        if length:
            actual = crc32c.crc32c(payload, actual)
        if actual != crc:
            self._finish(h.file_id, h.offset, "CRC mismatch")
            return None
        if version != RECORD_VERSION or rec_type not in RECORD_TYPES:
            self._finish(h.file_id, h.offset, f"unknown record version {version} type {rec_type}")
            return None
        h.offset += RECORD_HEADER_SIZE + length
        self.position = LogMark(h.file_id, h.offset)
        return JournalRecord(rec_type, ledger_id, entry_id, lac, payload), self.position

    def close(self) -> None:
        if self._handle is not None:
            self._handle.file.close()
            self._handle = None


def _first_nonzero(file: BinaryIO, offset: int) -> int | None:
    """The offset of the first non-zero byte from the file's position (at `offset`) on."""
    while chunk := file.read(1 << 20):
        stripped = chunk.lstrip(b"\0")
        if stripped:
            return offset + len(chunk) - len(stripped)
        offset += len(chunk)
    return None


@dataclass
class _Handle:
    file_id: int
    file: BinaryIO
    offset: int
    size: int
