"""Value types and errors of the managed ledger: positions, entries, ledger infos, config.

A Position is (ledger_id, entry_id). Ledger ids come from the metadata store's increasing
counter, so a managed ledger's ledgers are in increasing id order and plain tuple comparison
of positions is log order. This module holds data only: it must never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Position(NamedTuple):
    """Where one entry lives: the ledger and the entry id inside it (ordered like the log)."""

    ledger_id: int
    entry_id: int


@dataclass
class Entry:
    """One stored entry and the position it was read from."""

    position: Position
    data: bytes


@dataclass
class LedgerInfo:
    """One ledger of a managed ledger as seen from outside (a copy; changing it changes nothing).

    entries/size count acknowledged entries only; created_ms is wall-clock milliseconds;
    closed: no entry will ever be added (only closed ledgers can be rewritten).
    """

    ledger_id: int
    entries: int
    size: int
    created_ms: int
    closed: bool = True
    offloaded: bool = False  # a verified copy is in tiered storage
    on_bookies: bool = True  # False once the bookie copy was deleted after offloading


@dataclass
class ManagedLedgerConfig:
    """How a managed ledger writes, rolls over and trims.

    Rollover happens before the next append once the current ledger holds
    max_entries_per_ledger entries or max_ledger_bytes bytes, or is older than
    max_ledger_age_s (checked on append: an idle ledger is rolled by the next append).
    Retention (trim) ignores cursors: like Kafka, data goes by age/size only.
    """

    ensemble_size: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1
    max_entries_per_ledger: int = 50_000
    max_ledger_bytes: int = 256 << 20
    max_ledger_age_s: float = 4 * 3600
    retention_time_s: float | None = None
    retention_bytes: int | None = None
    # Added beyond the contract: bytes of recently appended entries kept in memory so that
    # tail reads need no bookie round trip (and so the newest entries of the open ledger,
    # whose LAC the bookies may not know yet, are always readable).
    tail_cache_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                f"{self.ensemble_size}/{self.write_quorum}/{self.ack_quorum}"
            )
        if self.max_entries_per_ledger < 1 or self.max_ledger_bytes < 1:
            raise ValueError("max_entries_per_ledger and max_ledger_bytes must be >= 1")
        if self.max_ledger_age_s <= 0:
            raise ValueError("max_ledger_age_s must be > 0")


class ManagedLedgerError(Exception):
    """Root of the managed ledger's errors."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Someone else owns this managed ledger now: a bookie refused an add because the ledger was
    fenced, or the metadata node changed under us (BadVersion). Nothing more can be written
    through this instance; it never overwrites the other owner's metadata."""


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger was closed (or deleted) by its owner in this process."""


class ManagedLedgerNotFoundError(ManagedLedgerError):
    """No managed ledger of that name exists."""


class InvalidPositionError(ManagedLedgerError):
    """A position that does not name a readable entry (trimmed, or beyond the last confirmed)."""


class MetadataFormatError(ManagedLedgerError):
    """A metadata node that this code cannot read (bad JSON or an unknown format version)."""


class CursorConflictError(ManagedLedgerError):
    """A cursor's node changed under us (BadVersion) or vanished: another owner writes it."""
