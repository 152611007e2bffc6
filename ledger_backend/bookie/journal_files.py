"""The bookie journal's file: where each group lands in it and when it rolls over (placement, in
the Trio thread), what the worker threads do to it (start a file, write a group and fdatasync
it), the clean close (cutting a zero-filled tail back to the last record) and trimming the
files a checkpoint no longer needs.  journal.py holds the group commit that drives these.

They are Journal's methods, bound in its class body (`self` is the journal, typed by the
`JournalFile` protocol): a group's placement and its write are on the add path, and a bound
module function costs a call exactly what a method defined in the class costs; instance
patches (tests replace journal._write_and_sync) work as before.

This module must never place a group before one placed earlier, nor write zeroes or a header
over a record, nor delete the current file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

import trio

from .crash_points import crash_point, crash_point_armed
from .file_format import (
    FILE_HEADER_SIZE,
    create_file_with_header,
    fsync_dir,
    pack_file_header,
    write_all,
)
from .journal_format import (
    JOURNAL_FILE_VERSION,
    JOURNAL_MAGIC,
    LogMark,
    encode_record,
    journal_file_name,
    list_journal_files,
)
from .journal_group import JournalFailedError, JournalGroup
from .journal_preallocation import ZeroFill

# journal.py's logger, as before these pieces moved here
log = logging.getLogger("ledger_backend.bookie.journal")


class JournalFile(Protocol):
    """What these steps use of Journal (the other file steps among them)."""

    _dir: Path
    _fsync: bool
    _max_file_bytes: int
    _zero_fill: ZeroFill
    _next_file_id: int
    _fd: int
    _file_id: int
    _file_size: int
    _open: JournalGroup
    _closed: bool
    _failed: BaseException | None
    written_mark: LogMark

    def _start_file(self, file_id: int, truncate_to: int | None = None) -> None: ...
    def _needs_roll(self, group: JournalGroup) -> bool: ...
    def _place(self, group: JournalGroup) -> tuple[int, int | None, int | None]: ...
    def _write_and_sync(self, records: list[tuple[int, int, int, int, bytes]], offset: int,
                        roll_to: int | None, truncate_to: int | None = None,
                        over_fill: bool = False) -> None: ...  # fmt: skip
    def _close_file(self, fd: int, truncate_to: int | None) -> None: ...
    def _unlink_older(self, file_id: int, current: int) -> list[int]: ...


def _start_file(self: JournalFile, file_id: int, truncate_to: int | None = None) -> None:
    """Blocking: fsync and close the current file (cut back to `truncate_to` first, when
    given: the end of its last record, before a zero-filled tail), start file `file_id`
    (header + dir fsync).  Runs while no other write or zero fill is in flight."""
    if self._fd >= 0:
        if truncate_to is not None:
            os.ftruncate(self._fd, truncate_to)
        if self._fsync:
            os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = -1
        crash_point("journal.mid_rollover")
    path = self._dir / journal_file_name(file_id)
    header = pack_file_header(JOURNAL_MAGIC, JOURNAL_FILE_VERSION, file_id)
    self._fd = create_file_with_header(path, header, fsync=self._fsync)


def _needs_roll(self: JournalFile, group: JournalGroup) -> bool:
    return self._file_size > FILE_HEADER_SIZE and \
        self._file_size + group.nbytes > self._max_file_bytes


def _place(self: JournalFile, group: JournalGroup) -> tuple[int, int | None, int | None]:
    """In the Trio thread: the offset `group` is written at, the file it starts first
    (None: the current one) and what the file it closes is cut back to (None: nothing);
    its end becomes its log mark."""
    roll_to = truncate_to = None
    if self._needs_roll(group):
        roll_to = self._next_file_id
        self._next_file_id += 1
        if self._zero_fill.zeroed_end > self._file_size:
            truncate_to = self._file_size
        self._file_id, self._file_size = roll_to, FILE_HEADER_SIZE
        self._zero_fill.zeroed_end = FILE_HEADER_SIZE
    offset = self._file_size
    self._file_size += group.nbytes
    group.end_mark = LogMark(self._file_id, self._file_size)
    return offset, roll_to, truncate_to


def _write_and_sync(self: JournalFile, records: list[tuple[int, int, int, int, bytes]],
                    offset: int, roll_to: int | None, truncate_to: int | None = None,
                    over_fill: bool = False) -> None:
    """In a worker thread: the group's records at `offset` (of file `roll_to`, started
    first, when not None; the old file cut back to `truncate_to`), then fdatasync.
    `over_fill`: placed over a zero fill in flight, which must not write after it."""
    buffers: list[bytes] = []
    for rec_type, ledger_id, entry_id, lac, payload in records:
        buffers.append(encode_record(rec_type, ledger_id, entry_id, lac, payload))
        if payload:
            buffers.append(payload)
    if roll_to is not None:
        self._start_file(roll_to, truncate_to)
    if over_fill:
        self._zero_fill.wait_for_step()
    if crash_point_armed("journal.mid_write"):  # a torn group: its first half, then death
        head = b"".join(buffers)
        write_all(self._fd, [head[: len(head) // 2]], offset)
        if self._fsync:
            os.fdatasync(self._fd)
        crash_point("journal.mid_write")
    write_all(self._fd, buffers, offset)
    crash_point("journal.after_write_before_fsync")
    if self._fsync:
        os.fdatasync(self._fd)
    crash_point("journal.after_fsync_before_ack")


async def _shutdown(self: JournalFile) -> None:
    # The closing write takes the open group away first: an add from now on is refused
    # (_enqueue), not put into a group whose records the write thread already encoded,
    # which would release it as fsynced without it being on disk.
    pending, self._open = self._open, JournalGroup()
    self._closed = True
    if pending.buffers and self._failed is None:
        try:
            offset, roll_to, truncate_to = self._place(pending)
            await trio.to_thread.run_sync(self._write_and_sync, pending.buffers, offset,
                                          roll_to, truncate_to)
            self.written_mark = pending.end_mark
        except OSError as exc:
            pending.error = exc
    elif pending.buffers:
        pending.error = JournalFailedError("journal failed")
    pending.release()
    if self._fd >= 0:
        fd, self._fd = self._fd, -1
        cut = self._file_size if self._zero_fill.zeroed_end > self._file_size \
            and self._failed is None and pending.error is None else None  # fmt: skip
        await trio.to_thread.run_sync(self._close_file, fd, cut)


def _close_file(self: JournalFile, fd: int, truncate_to: int | None) -> None:
    """Blocking: a clean close leaves no zero-filled tail behind its last record."""
    try:
        if truncate_to is not None:
            os.ftruncate(fd, truncate_to)
            if self._fsync:
                os.fdatasync(fd)
    except OSError as exc:  # the scanner reads a zero tail as the end anyway
        log.warning("journal: could not cut the preallocated tail: %r", exc)
    finally:
        os.close(fd)


async def trim_before(self: JournalFile, file_id: int) -> list[int]:
    """Delete journal files older than ``file_id`` (never the current one)."""
    return await trio.to_thread.run_sync(self._unlink_older, file_id, self._file_id)


def _unlink_older(self: JournalFile, file_id: int, current: int) -> list[int]:
    doomed = [i for i in list_journal_files(self._dir) if i < file_id and i != current]
    for i in doomed:
        (self._dir / journal_file_name(i)).unlink(missing_ok=True)
    if doomed and self._fsync:
        fsync_dir(self._dir)
    return doomed
