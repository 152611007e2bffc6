"""The persisted log mark: the journal position up to which everything is in entry logs + index.

File ``ledgers/checkpoint.mark``: file header (magic ``LWMK``, version 1) then
``u64 journal file id | u64 offset | u32 CRC-32C`` (CRC over the two numbers).  It is replaced
atomically (temp file, fsync, rename, directory fsync), so a reader finds the old mark or the
new one, never a mix.  Blocking helpers (run them in worker threads); this module must never
write the mark anywhere but through ``atomic_write_file``.
"""

from __future__ import annotations

import struct
from pathlib import Path

from .file_format import (
    FILE_HEADER_SIZE,
    BadFileError,
    atomic_write_file,
    check_file_header,
    crc32c_of,
    pack_file_header,
)
from .journal_format import LogMark

MARK_MAGIC = b"LWMK"
MARK_VERSION = 1
MARK_BODY = struct.Struct("<QQ")
MARK_FILE_NAME = "checkpoint.mark"


def write_mark(path: Path, mark: LogMark, *, fsync: bool = True) -> None:
    body = MARK_BODY.pack(mark.file_id, mark.offset)
    data = pack_file_header(MARK_MAGIC, MARK_VERSION, 0) + body + struct.pack("<I", crc32c_of(body))
    atomic_write_file(path, data, fsync=fsync)


def read_mark(path: Path) -> LogMark | None:
    """The persisted mark, None if there is none yet; BadFileError if it is damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    check_file_header(data, MARK_MAGIC, MARK_VERSION)
    body = data[FILE_HEADER_SIZE : FILE_HEADER_SIZE + MARK_BODY.size]
    tail = data[FILE_HEADER_SIZE + MARK_BODY.size : FILE_HEADER_SIZE + MARK_BODY.size + 4]
    if len(body) != MARK_BODY.size or len(tail) != 4:
        raise BadFileError("truncated checkpoint mark")
    if struct.unpack("<I", tail)[0] != crc32c_of(body):
        raise BadFileError("checkpoint mark CRC mismatch")
    file_id, offset = MARK_BODY.unpack(body)
    return LogMark(file_id, offset)
