"""One Kafka partition's log on a managed ledger: dense offsets, one record batch per entry.

Append: the batch is validated (batch_checks.py: header only, records never decoded), passes
the idempotent producer rules (producer_state.py; a batch ahead of its sequence waits briefly
for the earlier ones, sequence_gaps.py), gets the next offset patched into its baseOffset, and is
appended to the managed ledger.  Everything from the producer check to the start of
`ManagedLedger.append` happens without a Trio checkpoint, so concurrent produce requests get
offsets and entry ids in the same order and are pipelined; the append returns once the entry is
durable, and the high watermark is then the offset after the last acknowledged batch (the
managed ledger acknowledges in entry order).  The ledger append is shielded from cancellation so
the offset bookkeeping can never disagree with what the bookies hold.  If an append fails, the
log is marked failed (another broker may have fenced it) and refuses further work; the topic
service then opens a fresh instance, which recovers the truth from the ledger.

Transactions: transactional batches open a transaction per producer (producer_state.py);
COMMIT/ABORT markers come only from the transaction coordinator (`write_txn_marker`) and take
the same path as client batches (offset, producer state, ledger append, high watermark); a
client batch with the control bit is refused.  The last stable offset is min(first offset of
the oldest open or closing transaction, high watermark); `aborted_transactions` answers
read_committed fetches; readers waiting for stable data are woken whenever the high watermark
moves, which is also when a marker becomes durable and the last stable offset can move.

Read: the batch holding the offset and the ones after it, from the tail cache
(tail_cache.py) when recent, else located with the sparse offset index (offset_index.py) and
read from the managed ledger (partition_reads.py).  Stored bytes are returned unchanged.

Where things live: this module holds the log's state, its opening, the append checks and
waiting paths, producer snapshots, reads and closing; the steps an append takes once checked
and `append_built_soon` (an append answered from completion callbacks) are in
partition_append_steps.py, moving the log start and the compaction point in
partition_trimming.py (both bound as PartitionLog's methods).

Persistent state besides the ledger is one JSON metadata node per partition, CAS on its version
(partition_state.py): the log start offset, the compaction point and a producer-state snapshot.
On open, the offsets come from the ledger and producer state is rebuilt from the snapshot plus
the batches after it (partition_recovery.py).

This module must never decode records on the produce/fetch path or append without the
producer checks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from gateway.topics import partition_append_steps, partition_trimming
from gateway.topics.batch_checks import checked_batch, checked_built
from gateway.topics.offset_index import OffsetIndex
from gateway.topics.partition_append_steps import AppendResult, now_ms
from gateway.topics.partition_log_config import PartitionLogConfig
from gateway.topics.partition_reads import read_stored
from gateway.topics.partition_recovery import log_bounds, read_small_log, replay_producer_state
from gateway.topics.partition_state import PartitionStateNode
from gateway.topics.partition_timestamps import TimestampSearch
from gateway.topics.producer_state import ProducerStateManager
from gateway.topics.sequence_gaps import SequenceGaps
from gateway.topics.tail_cache import BatchTailCache
from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger.types import (
    Position,
)
from ledger_backend.metadata.store import BadVersionError, MetadataError, MetadataStore, NoNodeError
from protocols.kafka.built_batch import BuiltBatch
from protocols.kafka.errors import (
    KafkaProtocolError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    build_control_batch,
    parse_header,
)

log = logging.getLogger(__name__)

SHORT_REPLAY_BATCHES = 64  # fewer batches after the snapshot, no producers: none on close


class PartitionLog:
    """Open with `await PartitionLog.open(...)`; the topic service owns instances."""

    def __init__(
        self, name: str, ml: Any, store: MetadataStore, state_path: str, config: PartitionLogConfig
    ) -> None:
        self.name = name
        self.ledger = ml
        self._state = PartitionStateNode(store, state_path)
        self.config = config
        self.log_start_offset = 0
        self.high_watermark = 0
        self._next_offset = 0
        self._producers = ProducerStateManager()
        self.offset_index = OffsetIndex(config.index_append_interval)
        self._cache = BatchTailCache(config.tail_cache_bytes)
        self._timestamps = TimestampSearch()
        self.read_hints: dict[int, Position] = {}  # next offset -> its entry, for sequential reads
        # set (and replaced) by _wake_readers, only while somebody waits on it (_data_waiters):
        # an append that nobody waits for makes no Event
        self._data_event = trio.Event()
        self._data_waiters = 0
        self._failure: BaseException | None = None
        self._closed = False
        self._closing = False  # close() started: no new append may take an offset
        self._close_done = trio.Event()  # close() has finished
        self._sequence_gaps = SequenceGaps()  # batches waiting for their producer's earlier ones
        self._batches_since_snapshot = 0
        self._snapshot_running = False
        self._pending_snapshot: tuple[int, dict[str, object]] | None = None
        # idle unloading (TopicService.run_unloader): the topic service's use tick when this
        # log was last handed out, reads from the ledger under way, and background passes
        # (compaction, offload) that hold it
        self.used_tick = 0
        self._reads_in_flight = 0
        self._pins = 0

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, name: str, ml: Any, store: MetadataStore, state_path: str,
        config: PartitionLogConfig | None = None, *, state_created: bool = False,
    ) -> PartitionLog:
        """state_created: `ml` was created just now together with the state node holding
        PartitionStateNode.initial() (version 0), so there is nothing to read nor anybody to
        fence."""
        plog = cls(name, ml, store, state_path, config or PartitionLogConfig())
        if state_created:
            plog._state.created()
        else:
            await plog._load()
        return plog

    async def _load(self) -> None:
        state = await self._state.claim()
        small = await read_small_log(self)
        self.log_start_offset, end = await log_bounds(self, state, small)
        self.high_watermark = self._next_offset = end
        self._producers, self._batches_since_snapshot = await replay_producer_state(
            self, state.get("producer_snapshot"), small)
        log.info("%s: opened, offsets [%d, %d), %d producers", self.name,
                 self.log_start_offset, end, len(self._producers))

    # --- properties ------------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        return self._producers.first_unstable_offset(self.high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction overlapping [start, end)."""
        return [(a.producer_id, a.first_offset)
                for a in self._producers.aborted_between(start, end)]

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def closing(self) -> bool:
        """close() has started (or finished): nothing new may start on the log."""
        return self._closing or self._closed

    @property
    def busy(self) -> bool:
        """Work under way that closing the log would cut short: appends not yet durable, reads
        from the ledger, readers or producers waiting on it, a state write, a pinned pass."""
        return bool(self._next_offset != self.high_watermark or self._reads_in_flight
                    or self._sequence_gaps.waiting or self._pins or self._snapshot_running
                    or self._state.writing
                    or self._data_waiters)

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Keep the log from being unloaded as idle while a background pass works on it."""
        self._pins += 1
        try:
            yield
        finally:
            self._pins -= 1

    def _check_usable(self) -> None:
        if self._closed or self._closing:
            raise NotLeaderOrFollowerError(f"{self.name} is closed")
        if self._failure is not None:
            raise NotLeaderOrFollowerError(f"{self.name} failed: {self._failure!r}")

    # --- append ----------------------------------------------------------------------------------

    # the steps every append takes once checked, and the append run from completion callbacks
    # (partition_append_steps.py)
    append_built_soon = partition_append_steps.append_built_soon
    _assign = partition_append_steps._assign
    _reserve = partition_append_steps._reserve
    _append_failed = partition_append_steps._append_failed
    _appended = partition_append_steps._appended

    async def append(
        self, records: bytes | memoryview, *, timestamp_type_log_append: bool = False
    ) -> AppendResult:
        self._check_usable()
        now = now_ms()
        config = self.config
        header, view = checked_batch(
            records, log_name=self.name, now_ms=now, max_message_bytes=config.max_message_bytes,
            max_timestamp_diff_ms=config.max_timestamp_diff_ms, compacted=config.compacted)
        return await self._append_checked(header, view, now, timestamp_type_log_append)

    async def append_built(self, batch: BuiltBatch) -> AppendResult:
        """Append a batch this broker encoded (protocols/kafka/built_batch.py): the topic's
        limits are checked, its framing and CRC are not again (client bytes take `append`)."""
        self._check_usable()
        now = now_ms()
        header, view = checked_built(batch, self.config, log_name=self.name, now_ms=now)
        return await self._append_checked(header, view, now, False)

    async def _append_checked(self, header: BatchHeader, view: memoryview, now: int,
                              timestamp_type_log_append: bool) -> AppendResult:
        log_append = timestamp_type_log_append or self.config.log_append_time
        if self._producers.awaits_earlier_batches(header):
            await self._wait_for_earlier_batches(header)
            if self._producers.awaits_earlier_batches(header):
                raise NotEnoughReplicasError(
                    f"{self.name}: batch of producer {header.producer_id} starts at sequence "
                    f"{header.base_sequence}, earlier batches have not arrived; not stored")

        # From here to the ledger append: no checkpoint (offset order == entry order).
        duplicate = self._producers.check(header)
        if duplicate is not None:
            await self._wait_durable(duplicate.last_offset)
            return AppendResult(duplicate.first_offset, -1, self.log_start_offset)
        header, stored = self._assign(header, view, now, log_append)
        await self._store_batch(header, stored)
        return AppendResult(header.base_offset, now if log_append else -1, self.log_start_offset)

    async def _wait_for_earlier_batches(self, header: BatchHeader) -> None:
        """Let a batch that is ahead of its producer's last sequence wait (at most
        `sequence_gap_wait_s`) for the earlier batches still on their way (sequence_gaps.py)."""
        await self._sequence_gaps.wait(self._producers, header, self.config.sequence_gap_wait_s,
                                       self._check_usable)

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT or ABORT control batch for the producer; its offset once durable."""
        self._check_usable()
        self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = now_ms()
        control_type = CONTROL_COMMIT if commit else CONTROL_ABORT
        # From here to the ledger append: no checkpoint (offset order == entry order).
        base = self._next_offset
        stored = build_control_batch(
            control_type, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, base_offset=base, timestamp_ms=now,
        )
        header = parse_header(stored)
        self._producers.apply_marker(producer_id, producer_epoch, control_type,
                                     coordinator_epoch, base, now)
        if self._sequence_gaps.waiting:
            self._sequence_gaps.wake()
        self._reserve(header, stored)
        await self._store_batch(header, stored)
        return base

    async def _store_batch(self, header: BatchHeader, stored: bytes) -> None:
        """Append a batch whose offset and producer state are assigned and reserved; returns
        once durable."""
        try:
            with trio.CancelScope(shield=True):
                position = await self.ledger.append(stored)
        except BaseException as exc:
            failure = self._append_failed(exc)
            if failure is exc:
                raise
            raise failure from exc
        self._appended(header, position)
        pending = self._pending_snapshot
        if pending is not None and self.high_watermark >= pending[0]:
            try:
                await self._write_pending_snapshot()
            except (KafkaProtocolError, MetadataError):
                log_failure(log, "%s: producer snapshot failed", self.name)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            log.warning("%s: failed, refusing further work: %r", self.name, exc)
        self._cache.clear()
        self._wake_readers()
        self._sequence_gaps.wake()

    def _wake_readers(self) -> None:
        if self._data_waiters:
            event, self._data_event = self._data_event, trio.Event()
            event.set()

    async def _wait_for_change(self) -> None:
        """Until the next _wake_readers: an append made durable, a failure, the close."""
        self._data_waiters += 1
        try:
            await self._data_event.wait()
        finally:
            self._data_waiters -= 1

    async def _wait_durable(self, last_offset: int) -> None:
        while self.high_watermark <= last_offset:
            self._check_usable()
            await self._wait_for_change()

    # --- producer snapshots ----------------------------------------------------------------------

    def _capture_snapshot(self) -> None:
        """Copy producer state as of the next offset (synchronously: no append can interleave).

        It is persisted only once the high watermark reaches that offset, so a snapshot never
        describes a batch that a crash could still lose."""
        self._producers.expire(now_ms(), self.config.producer_id_expiration_ms)
        self._pending_snapshot = (self._next_offset, self._producers.snapshot(self._next_offset))
        self._batches_since_snapshot = 0

    async def _write_pending_snapshot(self) -> None:
        pending = self._pending_snapshot
        if pending is None or self._snapshot_running or self.high_watermark < pending[0]:
            return
        if self._failure is not None:
            return  # the high watermark no longer proves every offset below it durable
        self._snapshot_running = True
        self._pending_snapshot = None
        try:
            await self._write_state(producer_snapshot=pending[1])
        finally:
            self._snapshot_running = False

    async def _write_state(self, **changes: object) -> None:
        """CAS the partition state node; losing the CAS means another owner: fail the log."""
        try:
            await self._state.write(**changes)
        except (BadVersionError, NoNodeError) as exc:
            self._fail(exc)
            raise NotLeaderOrFollowerError(
                f"{self.name}: partition state changed by another owner"
            ) from exc

    # --- read ------------------------------------------------------------------------------------

    async def read_header(self, position: Position) -> BatchHeader:
        return parse_header(await self.ledger.read_entry(position))

    async def locate(self, offset: int) -> Position | None:
        return await self.offset_index.locate(offset, self.ledger.ledgers, self.read_header)

    async def read(self, offset: int, max_bytes: int) -> list[bytes]:
        self._check_usable()
        hw = self.high_watermark
        if offset < self.log_start_offset or offset > hw:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {hw}] of {self.name}"
            )
        if offset == hw:
            return []
        cached = self._cache.read(offset, hw, max_bytes)
        if cached is not None:
            return cached
        self._reads_in_flight += 1
        try:
            return await read_stored(self, offset, hw, max_bytes)
        finally:
            self._reads_in_flight -= 1

    async def wait_for_data(self, offset: int, timeout_s: float, *,
                            committed: bool = False) -> None:
        """Return once data past `offset` is readable (`committed`: below the last stable
        offset), the log closes or fails, or `timeout_s` passes."""
        with trio.move_on_after(timeout_s):
            while not self._closed and self._failure is None:
                end = self.last_stable_offset if committed else self.high_watermark
                if end > offset:
                    return
                await self._wait_for_change()

    async def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        self._check_usable()
        self._reads_in_flight += 1
        try:
            return await self._timestamps.offset_for_timestamp(self, ts_ms)
        finally:
            self._reads_in_flight -= 1

    async def max_timestamp_offset(self) -> tuple[int, int] | None:
        self._check_usable()
        self._reads_in_flight += 1
        try:
            return await self._timestamps.max_timestamp_offset(self)
        finally:
            self._reads_in_flight -= 1

    # --- trimming (partition_trimming.py) --------------------------------------------------------

    delete_records_before = partition_trimming.delete_records_before
    apply_retention = partition_trimming.apply_retention
    _set_log_start = partition_trimming._set_log_start

    # --- compaction (gateway/topics/compactor.py rewrites the ledgers) ----------------------------

    record_cleaned_through = partition_trimming.record_cleaned_through
    forget_rewritten = partition_trimming.forget_rewritten

    @property
    def cleaned_through(self) -> int:
        """Offsets below this were compacted (the cleaner's checkpoint; 0: never)."""
        return int(self._state.values.get("cleaned_through", 0))

    # --- closing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Snapshot producer state (if everything is durable) and close the managed ledger. A
        second call returns when the first has finished (a bundle release meeting an idle
        unload: the next owner's open must not race this close's metadata writes)."""
        if self._closing or self._closed:
            await self._close_done.wait()
            return
        # From here no append starts (it would take an offset while the final snapshot is
        # written, then meet a closing ledger: its producer sequence would be remembered here
        # but stored nowhere); those already under way finish or fail on their own.
        self._closing = True
        self._sequence_gaps.wake()
        # Without producers to remember, a few batches since the last snapshot are cheaper to
        # replay on the next open than a state write now (idle unloading closes many logs).
        replay_is_short = (not len(self._producers) and self._pending_snapshot is None
                           and self._batches_since_snapshot <= SHORT_REPLAY_BATCHES)
        try:
            if self._failure is None and not replay_is_short and (
                    self._batches_since_snapshot or self._pending_snapshot):
                with trio.CancelScope(shield=True):
                    try:
                        if self.high_watermark == self._next_offset:
                            self._capture_snapshot()
                        await self._write_pending_snapshot()
                    except (KafkaProtocolError, MetadataError):
                        log_failure(log, "%s: final producer snapshot failed", self.name)
        finally:
            self._closed = True
            self._wake_readers()
            self._sequence_gaps.wake()
            with trio.CancelScope(shield=True):
                try:
                    await self.ledger.close()
                finally:
                    self._close_done.set()


__all__ = ["AppendResult", "KafkaProtocolError", "PartitionLog", "PartitionLogConfig"]
