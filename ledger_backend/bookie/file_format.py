"""On-disk building blocks shared by the bookie's files: file headers, checksums, safe writes.

Every bookie file starts with a 16-byte header (4-byte magic, u16 format version, u16 flags,
u64 file id) and every record carries a length, a CRC-32C and a format version.  This module
knows only bytes and files: no Trio (callers run these blocking helpers in worker threads), no
knowledge of what records mean.  It must never write a file in place that a reader may need
intact after a crash: whole-file updates go through ``atomic_write_file``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path

import crc32c

FILE_HEADER = struct.Struct(">4sHHQ")  # magic, version, flags, file id
FILE_HEADER_SIZE = FILE_HEADER.size  # 16
IOV_MAX = 1024  # Linux limit on buffers per writev call


class BadFileError(Exception):
    """A file's header is missing, has the wrong magic or an unknown version."""


def crc32c_of(*parts: bytes | memoryview) -> int:
    value = 0
    for part in parts:
        value = crc32c.crc32c(part, value)
    return value


def pack_file_header(magic: bytes, version: int, file_id: int) -> bytes:
    return FILE_HEADER.pack(magic, version, 0, file_id)


def check_file_header(raw: bytes, magic: bytes, version: int) -> int:
    """Validate a header; return the file id stored in it."""
    if len(raw) < FILE_HEADER_SIZE:
        raise BadFileError(f"header too short ({len(raw)} bytes)")
    found_magic, found_version, _flags, file_id = FILE_HEADER.unpack_from(raw)
    if found_magic != magic:
        raise BadFileError(f"bad magic {found_magic!r}, expected {magic!r}")
    if found_version != version:
        raise BadFileError(f"unsupported format version {found_version}")
    return int(file_id)


def fsync_dir(directory: Path) -> None:
    """Make a create/rename/unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, buffers: Sequence[bytes | memoryview], offset: int | None = None) -> int:
    """Write every buffer with as few writev calls as IOV_MAX allows; return bytes written.

    With ``offset`` the bytes go exactly there (pwritev): after a failed, partial write the
    next call at the same offset overwrites the debris, so positions never drift.
    """
    total = 0
    for start in range(0, len(buffers), IOV_MAX):
        chunk = buffers[start : start + IOV_MAX]
        expected = sum(len(b) for b in chunk)
        if offset is None:
            written = os.writev(fd, chunk)
        else:
            written = os.pwritev(fd, chunk, offset + total)
        if written != expected:  # short write (rare: signals, disk full) — finish byte-wise
            rest = b"".join(chunk)[written:]
            done = written
            while rest:
                if offset is None:
                    n = os.write(fd, rest)
                else:
                    n = os.pwrite(fd, rest, offset + total + done)
                if n <= 0:
                    raise OSError(f"write made no progress ({n})")
                rest = rest[n:]
                done += n
        total += expected
    return total


def atomic_write_file(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync of the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [data])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def create_file_with_header(path: Path, header: bytes, *, fsync: bool = True) -> int:
    """Create a new file holding ``header``; fsync it and its directory; return an O_RDWR fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, [header])
        if fsync:
            os.fsync(fd)
            fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd
