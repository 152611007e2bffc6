"""What journal replay and the garbage collector may touch of the durable storage engine.

``storage.py`` owns the engine (DurableBookieStorage) and drives both helpers; they receive it
typed as one of these small Protocols instead of importing ``storage.py`` back, so the import
graph of ``ledger_backend/bookie`` stays a tree (storage -> journal_replay, garbage_collector
-> storage_parts) and the helpers reach only the operations named here, never private state.

``apply_*`` are the engine's in-memory effects of a journal record (write cache, ledger state,
index): synchronous, never journaled by the caller. ``checkpoint_locked`` must be called with
``checkpoint_lock`` held. This module must never import the engine or hold behaviour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import trio

from .entry_index import EntryIndex, IndexLog
from .entry_log import EntryLogDirectory, EntryLogWriter
from .journal import Journal
from .journal_format import LogMark
from .journal_scanner import ReplayStop
from .ledger_state import LedgerState, LedgerStateTable
from .storage_api import BookieStorageConfig
from .write_cache import WriteCache


class RecordEffects(Protocol):
    """The in-memory effect of each journal record type, and checkpointing under the lock."""

    states: LedgerStateTable
    checkpoint_lock: trio.Lock

    def apply_add(self, ledger_id: int, entry_id: int, lac: int, data: bytes) -> None: ...

    def apply_fence(self, ledger_id: int) -> LedgerState: ...

    def apply_delete(self, ledger_id: int) -> None: ...

    async def checkpoint_locked(self, mark: LogMark) -> None: ...


class ReplayTarget(RecordEffects, Protocol):
    """The engine as journal replay sees it at start-up."""

    journal_dir: Path
    write_cache: WriteCache
    replayed_records: int
    replay_stop: ReplayStop | None


class CollectorTarget(RecordEffects, Protocol):
    """The engine as the garbage collector and compaction see it."""

    config: BookieStorageConfig
    journal: Journal | None
    logs: EntryLogDirectory
    writer: EntryLogWriter
    index: EntryIndex
    index_log: IndexLog
