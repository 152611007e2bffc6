"""Errors raised by the ledger client (real and in-memory).

Every failure the ledger client reports to its callers is a subclass of `LedgerError`, so a
managed ledger can catch one root. This module holds only exception types: it must never import
Trio, the metadata store or the bookie protocol.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Root of every ledger-client error."""


class LedgerFencedError(LedgerError):
    """The ledger was fenced (opened for recovery by another client): this writer may not add."""


class LedgerClosedError(LedgerError):
    """The handle or the ledger is closed: no more adds, or a read past the closed end."""


class NoSuchLedgerError(LedgerError):
    """The ledger's metadata does not exist (never created, or deleted)."""


class NoSuchEntryError(LedgerError):
    """The entry does not exist, or lies beyond what this handle may read (past the LAC)."""


class NotEnoughBookiesError(LedgerError):
    """Fewer writable bookies are registered than the ensemble (or a replacement) needs."""


class BKTimeoutError(LedgerError):
    """A bookie (or the metadata store) did not answer within the client's timeout."""


class DigestMismatchError(LedgerError):
    """An entry read from a bookie failed its CRC-32C check or names another ledger/entry."""


class BookieUnavailableError(LedgerError):
    """A bookie could not be reached or closed the connection; callers may try another."""


class BookieRequestError(LedgerError):
    """A bookie answered a request with an error status the caller did not expect."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LedgerMetadataError(LedgerError):
    """Ledger metadata is unreadable (bad JSON, unknown format version) or inconsistent."""


class MetadataStoreError(LedgerError):
    """The metadata store failed in a way the client cannot handle (e.g. its session expired)."""


class LedgerRecoveryError(LedgerError):
    """Recovery could not decide where the ledger ends (too few bookies answered)."""


class InvalidQuorumError(LedgerError, ValueError):
    """The requested quorums break E >= Qw >= Qa >= 1."""
