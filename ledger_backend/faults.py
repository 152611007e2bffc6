"""Expected storage faults: which ledger-backend failures they are, and how they are logged.

A bookie that is down, a metadata store that is slow or lost our session, a ledger fenced by
the next owner: these happen in a healthy cluster and a client must be able to retry through
them. `storage_fault_of` sorts an exception into

* `StorageFault.MOVED` -- another owner took the ledger (fencing, a metadata CAS lost, the
  managed ledger closed by a hand-off): the client should look up the owner again;
* `StorageFault.UNAVAILABLE` -- too few bookies or the metadata store did not answer: the
  client should retry the same request later;
* `StorageFault.DAMAGED` -- an offloaded object is missing or fails its checksums: the data
  cannot be served until the object is restored, and the client must be told so (a silently
  retried code would look like a hang);

or None when it is not an expected storage fault (a bug, corrupt data, a missing ledger), which
callers keep reporting as such. `warn_fault` logs an expected fault as one WARNING line without
a traceback, at most once per `interval_s` per key, counting what it held back; `log_failure`,
called in an `except` block, does that for an expected fault (a storage fault, a connection
to a peer gone, an error whose wire code clients retry) and logs anything else with its
traceback (a bug).

An error that says "no longer served here" (`is_released_here`: a bundle this broker releases
or lost) is not even a fault for a background service: the release cancels the service next,
and until it does its passes meet the released unit.  `log_failure` notes it at DEBUG.

This module only classifies and logs: it must never decide a wire code (the protocol fronts
map the kinds to their own codes) and never import Trio, the network or a protocol.
"""

from __future__ import annotations

import enum
import logging
import sys
import time
from collections.abc import Iterator

from ledger_backend.client.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataStoreError,
    NotEnoughBookiesError,
)
from ledger_backend.managed_ledger.types import (
    CursorConflictError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataUnavailableError,
    SessionExpiredError,
)
from ledger_backend.offload.offloader import (
    ObjectStoreUnavailableError,
    OffloadedObjectDamagedError,
    OffloadedReadError,
)


class StorageFault(enum.Enum):
    MOVED = "moved"
    UNAVAILABLE = "unavailable"
    DAMAGED = "damaged"


_MOVED: tuple[type[BaseException], ...] = (
    LedgerFencedError,
    ManagedLedgerFencedError,
    ManagedLedgerClosedError,
    CursorConflictError,
    BadVersionError,
)
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    NotEnoughBookiesError,
    BKTimeoutError,
    BookieUnavailableError,
    LedgerRecoveryError,
    LedgerClosedError,  # a write handle failed and closed under an append
    MetadataStoreError,
    SessionExpiredError,
    MetadataUnavailableError,
    OffloadedReadError,  # an offloaded object out of reach: readers retry, the log names it
    ObjectStoreUnavailableError,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then (through exception groups of one) the exceptions it was raised from."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        seen += 1
        if isinstance(current, BaseExceptionGroup) and len(current.exceptions) == 1:
            current = current.exceptions[0]
            continue
        yield current
        current = current.__cause__


def storage_fault_of(exc: BaseException) -> StorageFault | None:
    """The kind of expected storage fault `exc` is (looking through an exception group of one
    and through the exception it was raised from), or None."""
    for current in _chain(exc):
        if isinstance(current, _MOVED):
            return StorageFault.MOVED
        if isinstance(current, OffloadedObjectDamagedError):
            return StorageFault.DAMAGED
        if isinstance(current, _UNAVAILABLE):
            return StorageFault.UNAVAILABLE
    return None


def is_released_here(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) says its unit is no longer served by this
    broker: the error class sets `released_here = True` (duck-typed, as RocketMQ's "bundle
    not served here" does, so this module needs no protocol)."""
    return any(getattr(current, "released_here", False) is True for current in _chain(exc))


class _Limiter:
    def __init__(self) -> None:
        self.last: dict[tuple[str, str], float] = {}
        self.held: dict[tuple[str, str], int] = {}


_limiter = _Limiter()


def warn_fault(logger: logging.Logger, key: str, message: str, *args: object,
               interval_s: float = 10.0) -> None:  # fmt: skip
    """Log `message % args` as one WARNING line (no traceback), at most once per `interval_s`
    for the same logger and `key`; the next line says how many were held back."""
    slot = (logger.name, key)
    now = time.monotonic()
    last = _limiter.last.get(slot)
    if last is not None and now - last < interval_s:
        _limiter.held[slot] = _limiter.held.get(slot, 0) + 1
        return
    _limiter.last[slot] = now
    held = _limiter.held.pop(slot, 0)
    if held:
        message += " (%d more like it in the last %.0f s)"
        args = (*args, held, now - last if last is not None else interval_s)
    logger.warning(message, *args)
    if len(_limiter.last) > 10_000:  # keys are per partition or peer: bound them anyway
        _limiter.last.clear()
        _limiter.held.clear()


def is_expected_fault(exc: BaseException) -> bool:
    """A fault a healthy cluster has now and then: a storage fault, a peer connection gone, or
    a protocol error whose wire code clients retry (duck-typed: `exc.code.retriable`, as the
    Kafka errors carry, so this module needs no protocol)."""
    if storage_fault_of(exc) is not None or isinstance(exc, ConnectionError) \
            or is_released_here(exc):
        return True
    return bool(getattr(getattr(exc, "code", None), "retriable", False))


def log_failure(logger: logging.Logger, message: str, *args: object,
                bug_level: int = logging.WARNING, interval_s: float = 10.0) -> None:  # fmt: skip
    """In an `except` block: an expected fault as one rate-limited WARNING line (`message`,
    then the exception's repr), a unit released here at DEBUG (`is_released_here`), anything
    else at `bug_level` with its traceback."""
    exc = sys.exc_info()[1]
    if exc is not None and is_released_here(exc):
        logger.debug(message + ": %r", *args, exc)
    elif exc is not None and is_expected_fault(exc):
        warn_fault(logger, message, message + ": %r", *args, exc, interval_s=interval_s)
    else:
        logger.log(bug_level, message, *args, exc_info=True)
