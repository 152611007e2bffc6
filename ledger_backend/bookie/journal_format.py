"""The bookie journal's files and records as they lie on disk, for its writer (journal.py)
and its readers (journal_scanner.py, replay, the Spark bridge), which need nothing else of it.

Files are ``journal/<id as 16 hex digits>.jnl``; each starts with the 16-byte file header
(magic ``LWJN``, version 1, file id).  Each record is a 36-byte header then the payload:

    u32 payload length | u32 CRC-32C | u8 format version | u8 type | u16 reserved |
    u64 ledger id | i64 entry id | i64 lac | payload

The CRC covers the length field and everything after the CRC field, payload included, so a
torn or flipped record is always refused.  Types: ADD (an entry; ``lac`` is the writer's LAC),
FENCE and DELETE (ledger state changes, no payload).

A position in the journal is a ``LogMark`` (file id, byte offset); the checkpoint mark is one.
This module must never change a byte of the format without a new version: files written by
earlier bookies are replayed with it.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import crc32c

JOURNAL_MAGIC = b"LWJN"
JOURNAL_FILE_VERSION = 1
RECORD_VERSION = 1
RECORD_HEADER = struct.Struct(">IIBBHQqq")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 36
MAX_RECORD_PAYLOAD = 256 << 20  # anything longer is corruption, not an entry

TYPE_ADD = 1
TYPE_FENCE = 2
TYPE_DELETE = 3
RECORD_TYPES = (TYPE_ADD, TYPE_FENCE, TYPE_DELETE)


class LogMark(NamedTuple):
    """A position in the journal: (file id, byte offset in that file)."""

    file_id: int
    offset: int


class JournalRecord(NamedTuple):
    type: int
    ledger_id: int
    entry_id: int
    lac: int
    payload: bytes


def journal_file_name(file_id: int) -> str:
    return f"{file_id:016x}.jnl"


def list_journal_files(directory: Path) -> list[int]:
    ids = []
    for path in directory.glob("*.jnl"):
        try:
            ids.append(int(path.stem, 16))
        except ValueError:
            continue
    return sorted(ids)


def encode_record(
    rec_type: int, ledger_id: int, entry_id: int, lac: int, payload: bytes = b""
) -> bytes:
    """The 36-byte header for a record (the payload is written after it, not copied in)."""
    length = len(payload)
    unsigned = RECORD_HEADER.pack(length, 0, RECORD_VERSION, rec_type, 0, ledger_id, entry_id, lac)
    crc = crc32c.crc32c(unsigned[8:], crc32c.crc32c(unsigned[:4]))
    if length:
        crc = crc32c.crc32c(payload, crc)
    return unsigned[:4] + crc.to_bytes(4, "big") + unsigned[8:]
