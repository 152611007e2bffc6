"""Managed ledgers: a partition's log as a chain of ledgers with durable cursors.

One writer per managed ledger; every metadata change is a compare-and-set; the current ledger
is never deleted. Closed ledgers can be rewritten (compacted) and swapped in by one CAS
(ledger_swap.py). See managed_ledger.py and factory.py for the rules in full.
"""

from ledger_backend.managed_ledger.cursor import Cursor
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.managed_ledger.ledger_swap import (
    REWRITE_CRASH_POINTS,
    LedgerRewrite,
    RewriteConflictError,
)
from ledger_backend.managed_ledger.managed_ledger import ManagedLedger
from ledger_backend.managed_ledger.types import (
    CursorConflictError,
    Entry,
    InvalidPositionError,
    LedgerInfo,
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
    MetadataFormatError,
    Position,
)

__all__ = [
    "Cursor",
    "CursorConflictError",
    "Entry",
    "InvalidPositionError",
    "LedgerInfo",
    "LedgerRewrite",
    "ManagedLedger",
    "ManagedLedgerClosedError",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "ManagedLedgerFencedError",
    "ManagedLedgerNotFoundError",
    "MetadataFormatError",
    "Position",
    "REWRITE_CRASH_POINTS",
    "RewriteConflictError",
]
