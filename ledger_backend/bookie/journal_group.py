"""A journal group: the records one write + fdatasync takes (group commit, journal.py), and its
release: the tasks waiting for it are woken and append_soon's callbacks run, once, in the Trio
thread, after its write ended (fsynced, or failed: then with JournalFailedError).

This module must never release a group twice, nor call a callback outside the Trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import outcome
import trio

from .journal_format import LogMark
from .storage_api import BookieError

# journal.py's logger, as before these pieces moved here
log = logging.getLogger("ledger_backend.bookie.journal")


@dataclass
class JournalGroup:
    # (type, ledger id, entry id, lac, payload) per record: headers and CRCs are computed in
    # the worker thread that writes the group, not on the Trio thread.
    buffers: list[tuple[int, int, int, int, bytes]] = field(default_factory=list)
    nbytes: int = 0
    first_arrival: float = 0.0
    # made only when a task waits: the journal task for a max-wait group to fill (full), a
    # waiting add or drain() for the release (done); append_soon's adds wait for neither
    full: trio.Event | None = None
    done: trio.Event | None = None
    released: bool = False
    error: BaseException | None = None
    # append_soon's completions: called with None once the group is fsynced, or the error
    callbacks: list[Callable[[BaseException | None], None]] = field(default_factory=list)
    end_mark: LogMark = LogMark(0, 0)  # where its records end in the journal (once placed)
    write_result: outcome.Outcome[None] | None = None  # its worker's, once it returned
    write_seconds: float = 0.0
    starts_file: bool = False  # its write starts the next journal file (so it runs alone)

    async def wait_released(self) -> None:
        if self.done is None:
            self.done = trio.Event()
        if self.released:
            self.done.set()
        await self.done.wait()

    def release(self) -> None:
        """Wake the group's waiters and run its callbacks (in the Trio thread)."""
        self.released = True
        if self.done is not None:
            self.done.set()
        error = None if self.error is None else \
            JournalFailedError(f"journal write failed: {self.error!r}")
        for callback in self.callbacks:
            try:
                callback(error)
            except Exception:
                log.exception("journal completion callback failed")


class JournalFailedError(BookieError):
    """The journal could not write or fsync; no further add can be acknowledged."""
