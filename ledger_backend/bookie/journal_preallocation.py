"""Zero-filling the current journal file ahead of its writes (BookKeeper's journal
preallocation): the bookkeeping the journal's Trio thread keeps, and the blocking fill.

A fill covers [start, end) of the file with zeroes a MiB step at a time, each step written
under a lock and only below a limit, each fdatasynced (a long writeback would hold up the
groups' fdatasyncs).  A group placed over a fill in flight lowers the limit to its offset and
takes the lock once before its own write (the step under way ends first), so zeroes never land
after a record.  This module must never write below a limit a group has set.
"""

from __future__ import annotations

import logging
import os
import threading

import outcome

from .crash_points import crash_point

log = logging.getLogger("ledger_backend.bookie.journal")

_ZEROS = bytes(1 << 20)  # what a fill writes, a MiB per step


class ZeroFill:
    """The current journal file's zero fill: how far it reaches, the fill in flight."""

    def __init__(self, chunk: int) -> None:
        self.chunk = max(0, chunk)  # 0: off
        self.zeroed_end = 0  # the file is zero-filled (and fsynced) up to here
        self.in_flight: tuple[int, int] | None = None  # [start, end)
        self._lock = threading.Lock()
        self._limit = 0  # a fill writes only below this (a group placed over it lowers it)

    def next_range(self, file_size: int, max_file_bytes: int) -> tuple[int, int] | None:
        """In the Trio thread: the range to fill next (now in flight), or None when less than
        half a chunk ahead is filled and nothing is in flight; never below `file_size`."""
        if self.chunk <= 0 or self.in_flight is not None:
            return None
        if self.zeroed_end - file_size > self.chunk // 2:
            return None
        start = max(self.zeroed_end, file_size)
        end = min(start + self.chunk, max_file_bytes)
        if end <= start:
            return None
        self.in_flight = (start, end)
        self._limit = end
        return start, end

    def placed(self, offset: int, end: int) -> bool:
        """In the Trio thread: a group placed at [offset, end); whether it lies over the fill
        in flight (which then stops below it; the group's thread must `wait_for_step`)."""
        if self.in_flight is None or end <= self.in_flight[0]:
            return False
        self._limit = min(self._limit, offset)
        return True

    def wait_for_step(self) -> None:
        """In a group's thread: the fill's step under way ends; its limit stops the rest."""
        with self._lock:
            pass

    def fill(self, fd: int, start: int, end: int, fsync: bool) -> int:
        """In a worker thread: zeroes over [start, end) of `fd`, or up to the limit; returns
        where they end."""
        zeros = memoryview(_ZEROS)
        position = start
        while position < end:
            with self._lock:
                stop = min(end, self._limit, position + len(zeros))
                if stop <= position:
                    break
                position += os.pwrite(fd, zeros[: stop - position], position)
            crash_point("journal.mid_preallocate")
            if fsync:
                os.fdatasync(fd)
        crash_point("journal.after_preallocate")
        return position

    def finished(self, result: outcome.Outcome[int]) -> None:
        """In the Trio thread: the fill in flight ended."""
        self.in_flight = None
        if isinstance(result, outcome.Error):
            # nothing was placed there, so nothing is lost: groups simply grow the file
            log.warning("journal preallocation failed, going on without it: %r", result.error)
            self.chunk = 0
        else:
            self.zeroed_end = max(self.zeroed_end, result.unwrap())
