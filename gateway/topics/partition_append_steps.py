"""The steps of a partition log's append once its batch is checked (one module per concern:
partition_log.py keeps the checks, the waiting paths and the log's state), and the append
that runs them from completion callbacks.

`_assign` gives a batch its offsets (and notes it in the producer state), `_reserve` moves the
next offset past it (capturing a producer snapshot when due) and puts it in the tail cache,
`_append_failed` fails the log with a ledger append and says what to raise instead,
`_appended` indexes a durable batch and moves the high watermark.  PartitionLog's waiting
paths (`_append_checked`, `write_txn_marker`, `_store_batch`) and `append_built_soon` share
them; `append_built_soon` takes them without a task of its own, its answer coming from the
managed ledger's completion (ManagedLedger.append_soon).

They are PartitionLog's methods (bound in its class body: `self` is the log, typed by the
`AppendingLog` protocol), kept here for size; `AppendResult` is what an append answers.

This module must never decode records or append without the producer checks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.topics.batch_checks import checked_built
from gateway.topics.offset_index import OffsetIndex
from gateway.topics.partition_log_config import PartitionLogConfig
from gateway.topics.partition_timestamps import TimestampSearch
from gateway.topics.producer_state import ProducerStateManager
from gateway.topics.sequence_gaps import SequenceGaps
from gateway.topics.tail_cache import BatchTailCache
from ledger_backend.faults import StorageFault, storage_fault_of
from ledger_backend.managed_ledger.types import ManagedLedgerFencedError, Position
from protocols.kafka.built_batch import BuiltBatch
from protocols.kafka.errors import (
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
)
from protocols.kafka.record_batch import BatchHeader, patch_base_offset, set_log_append_time

# partition_log.py's logger, as before these steps moved here
log = logging.getLogger("gateway.topics.partition_log")


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    log_append_time_ms: int  # -1 unless the batch was stamped LogAppendTime
    log_start_offset: int


def now_ms() -> int:
    return int(time.time() * 1000)


class AppendingLog(Protocol):
    """What these steps use of PartitionLog (a Protocol, so this module does not import it)."""

    name: str
    config: PartitionLogConfig
    ledger: Any
    high_watermark: int
    log_start_offset: int
    offset_index: OffsetIndex
    _next_offset: int
    _producers: ProducerStateManager
    _sequence_gaps: SequenceGaps
    _cache: BatchTailCache
    _timestamps: TimestampSearch
    _failure: BaseException | None
    _batches_since_snapshot: int
    _pending_snapshot: tuple[int, dict[str, object]] | None

    def _check_usable(self) -> None: ...
    def _capture_snapshot(self) -> None: ...
    def _fail(self, exc: BaseException) -> None: ...
    def _wake_readers(self) -> None: ...
    def _assign(self, header: BatchHeader, view: memoryview, now: int, log_append: bool
                ) -> tuple[BatchHeader, bytes]: ...  # fmt: skip
    def _reserve(self, header: BatchHeader, stored: bytes) -> None: ...
    def _append_failed(self, exc: BaseException) -> BaseException: ...
    def _appended(self, header: BatchHeader, position: Position) -> None: ...


def append_built_soon(self: AppendingLog, batch: BuiltBatch,
                      on_done: Callable[[AppendResult | BaseException], None]) -> bool:
    """append_built without a waiting task, when nothing can make the append wait: a batch
    without a producer id (no sequence to check), no producer snapshot due, and a ledger
    that takes it at once (ManagedLedger.takes_append_soon).  `on_done` gets the
    AppendResult once the batch is durable, or the exception append_built would raise, in
    the Trio thread (possibly before this returns).  False: nothing was started; use
    append_built.  The topic's limits are checked first: their errors are raised."""
    self._check_usable()
    now = now_ms()
    header, view = checked_built(batch, self.config, log_name=self.name, now_ms=now)
    ledger = self.ledger
    if header.producer_id >= 0 or self._pending_snapshot is not None \
            or self._batches_since_snapshot + 1 >= self.config.snapshot_interval_batches \
            or not getattr(ledger, "takes_append_soon", bool)():  # fmt: skip
        return False
    # From here to the ledger append: no checkpoint (offset order == entry order).
    log_append = self.config.log_append_time
    header, stored = self._assign(header, view, now, log_append)
    base = header.base_offset
    answered = False  # on_done is called once, whatever raises on the way

    def stored_durably(result: Any) -> None:
        nonlocal answered
        if answered:
            return
        answer: AppendResult | BaseException
        if isinstance(result, BaseException):
            answer = self._append_failed(result)
            if answer is not result:
                answer.__cause__ = result
        else:
            try:
                self._appended(header, result)
                answer = AppendResult(base, now if log_append else -1, self.log_start_offset)
            except NotEnoughReplicasAfterAppendError as exc:
                answer = exc
            except Exception as exc:  # a bug: the log's state is in doubt, the caller hears it
                self._fail(exc)
                answer = exc
        answered = True
        on_done(answer)

    try:
        ledger.append_soon(stored, stored_durably)
    except Exception as exc:
        if answered:  # on_done itself raised (a bug of the caller's): logged, not answered again
            log.exception("%s: append completion failed", self.name)
        else:  # offsets are taken: the log fails, as append_built's would
            stored_durably(exc)
    return True


def _assign(self: AppendingLog, header: BatchHeader, view: memoryview, now: int, log_append: bool
            ) -> tuple[BatchHeader, bytes]:  # fmt: skip
    """Give a checked batch the next offsets and note it in the producer state and the
    tail cache: the stored bytes, to append before any checkpoint."""
    base = self._next_offset
    if log_append:
        buf = bytearray(view)
        patch_base_offset(buf, base)
        set_log_append_time(buf, now)
        stored = bytes(buf)
    else:
        stored = base.to_bytes(8, "big", signed=True) + view[8:]
    header.base_offset = base
    self._producers.update(header, base, now)
    if self._sequence_gaps.waiting:
        self._sequence_gaps.wake()
    self._reserve(header, stored)
    return header, stored


def _reserve(self: AppendingLog, header: BatchHeader, stored: bytes) -> None:
    """Before the ledger append of a batch whose offsets are assigned: the next offset
    moves past it, a producer snapshot is captured when due, the tail cache holds it."""
    base = header.base_offset
    last = base + header.last_offset_delta
    self._next_offset = last + 1
    self._batches_since_snapshot += 1
    if (self._batches_since_snapshot >= self.config.snapshot_interval_batches
            and self._pending_snapshot is None):
        self._capture_snapshot()  # state after [0, next offset): written once all durable
    self._cache.put(base, last, stored)


def _append_failed(self: AppendingLog, exc: BaseException) -> BaseException:
    """The log fails with a batch's ledger append: what the append raises instead."""
    self._fail(exc)
    if isinstance(exc, ManagedLedgerFencedError):
        return NotLeaderOrFollowerError(f"{self.name} is owned elsewhere now")
    if storage_fault_of(exc) is StorageFault.UNAVAILABLE:  # outcome unknown: retry
        return NotEnoughReplicasAfterAppendError(
            f"{self.name}: append not acknowledged: {exc!r}")
    if isinstance(exc, Exception):
        return KafkaStorageError(f"{self.name}: append failed: {exc!r}")
    return exc


def _appended(self: AppendingLog, header: BatchHeader, position: Position) -> None:
    """A batch's ledger append is durable: index it and move the high watermark."""
    if self._failure is not None:
        # An earlier batch failed while this one was in flight: its offsets may be a hole
        # below this batch, so neither the high watermark nor a producer snapshot may move
        # past it. Fail this batch too; the client retries on a fresh log, where the
        # producer state rebuilt from the log decides what is a duplicate.
        raise NotEnoughReplicasAfterAppendError(
            f"{self.name}: an earlier append failed") from self._failure
    base = header.base_offset
    last = base + header.last_offset_delta
    self.offset_index.record_append(position, base, last)
    if not header.is_control:
        self._timestamps.on_append(header, base)
    if last + 1 > self.high_watermark:
        self.high_watermark = last + 1
        self._wake_readers()
