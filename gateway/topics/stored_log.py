"""What the readers of a partition log need from it, as a small interface.

`PartitionLog` (partition_log.py) appends and owns the state; the non-cached read path
(partition_reads.py) and the timestamp search (partition_timestamps.py) only read through this
interface, so neither imports the log that uses them.  This module must never hold behaviour.
"""

from __future__ import annotations

from typing import Any, Protocol

from ledger_backend.managed_ledger.types import Position


class ReplayConfig(Protocol):
    replay_chunk_entries: int


class OffsetHints(Protocol):
    def record_read(self, position: Position, base_offset: int, last_offset: int) -> None: ...


class StoredLog(Protocol):
    """A partition's managed ledger, its offsets and the hints that make sequential reads cheap."""

    name: str
    ledger: Any  # ledger_backend's ManagedLedger (or a twin in tests)
    read_hints: dict[int, Position]  # next offset -> the entry holding it
    high_watermark: int
    log_start_offset: int

    @property
    def config(self) -> ReplayConfig: ...

    @property
    def offset_index(self) -> OffsetHints: ...

    async def locate(self, offset: int) -> Position | None:
        """The entry holding `offset` (or the first after it), None when no longer stored."""
        ...
