"""Named crash points for durability tests: SIGKILL this process at a chosen step.

``crash_point(name)`` does nothing unless the environment variable LEDGERWIRE_CRASH_AT equals
``name``; then the process kills itself with SIGKILL on the N-th hit (LEDGERWIRE_CRASH_AFTER=N,
default 1).  SIGKILL leaves no chance to flush or clean up, which is the point: the storage
engine must survive a death at any of these steps.  This module must never do anything else
(no logging, no I/O) on the hot path when no crash is configured.

Names used by the engine:
  journal.after_write_before_fsync, journal.after_fsync_before_ack,
  journal.after_preallocate (a zero fill fsynced, before a group writes into it),
  journal.mid_write (the first half of a group written and fsynced, then death),
  journal.mid_preallocate (a zero fill's step written, not yet fsynced),
  journal.mid_rollover (the old file cut back, fsynced and closed; the next not created yet),
  checkpoint.between_entrylog_steps (one step of the entry log written and fdatasynced, more
  to come: entries in the log that no index names yet),
  checkpoint.after_entrylog_fsync, checkpoint.after_index_flush, checkpoint.after_mark,
  compaction.after_copy, compaction.after_index_update
The managed ledger's rewrite (ledger_swap.py) has its own: managed_ledger.rewrite.*
(REWRITE_CRASH_POINTS there), its one-transaction close managed_ledger.close.*
(CLOSE_CRASH_POINTS in managed_ledger.py), and a new owner's one-transaction list write
managed_ledger.open.* (OPEN_CRASH_POINTS in factory.py); moving a data directory's single
coordinator ledgers into partition ledgers coordinator_layout.* (CRASH_POINTS in
gateway/coordinator/single_ledger_migration.py).
"""

from __future__ import annotations

import os
import signal
import threading

CRASH_POINT_NAMES = (
    "journal.after_write_before_fsync",
    "journal.after_fsync_before_ack",
    "journal.after_preallocate",
    "journal.mid_write",
    "journal.mid_preallocate",
    "journal.mid_rollover",
    "checkpoint.between_entrylog_steps",
    "checkpoint.after_entrylog_fsync",
    "checkpoint.after_index_flush",
    "checkpoint.after_mark",
    "compaction.after_copy",
    "compaction.after_index_update",
)

_crash_at: str | None = os.environ.get("LEDGERWIRE_CRASH_AT") or None
_crash_after: int = int(os.environ.get("LEDGERWIRE_CRASH_AFTER", "1") or "1")
_hits = 0
_lock = threading.Lock()  # crash points are hit from worker threads too


def configure(name: str | None, after: int = 1) -> None:
    """Set the crash point in-process (the environment is read once at import)."""
    global _crash_at, _crash_after, _hits
    with _lock:
        _crash_at, _crash_after, _hits = name, after, 0


def crash_point_armed(name: str) -> bool:
    """Whether `name` is the configured crash point (for a step that must be set up to crash
    mid-way, such as a torn write); false at once when no crash is configured."""
    return _crash_at is not None and name == _crash_at


def crash_point(name: str) -> None:
    global _hits
    if _crash_at is None or name != _crash_at:
        return
    with _lock:
        _hits += 1
        if _hits < _crash_after:
            return
    os.kill(os.getpid(), signal.SIGKILL)
