"""One Kafka partition's log on a managed ledger: dense offsets, one record batch per entry.

Append: the batch is validated (header only, records never decoded), passes the idempotent
producer rules (producer_state.py), gets the next offset patched into its baseOffset, and is
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

Persistent state besides the ledger (a JSON metadata node per partition, CAS on its version):
the log start offset (DeleteRecords and retention move it) and a producer-state snapshot with
the offset it covers (open transactions and the aborted-transactions index included).  On
open, the high watermark comes from the header of the last entry (or
the log start when no entry is left), and producer state is rebuilt from the snapshot plus the
batches after it.

This module must never decode records on the produce/fetch path or append without the
producer checks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import trio

from gateway.topics.offset_index import OffsetIndex
from gateway.topics.partition_reads import read_stored
from gateway.topics.partition_timestamps import TimestampSearch
from gateway.topics.producer_state import ProducerStateManager
from gateway.topics.tail_cache import BatchTailCache
from ledger_backend.faults import StorageFault, log_failure, storage_fault_of
from ledger_backend.managed_ledger.types import (
    InvalidPositionError,
    ManagedLedgerFencedError,
    Position,
)
from ledger_backend.metadata.store import BadVersionError, MetadataError, MetadataStore, NoNodeError
from protocols.kafka.batch_compaction import keyless_record_indexes
from protocols.kafka.errors import (
    InvalidRecordError,
    KafkaProtocolError,
    KafkaStorageError,
    MessageTooLargeError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from protocols.kafka.legacy_message_set import convert_legacy_to_batch
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    build_control_batch,
    iter_batches,
    parse_header,
    patch_base_offset,
    records_magic,
    set_log_append_time,
    validate_batch,
)

log = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
SHORT_REPLAY_BATCHES = 64  # fewer batches after the snapshot, no producers: none on close


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    log_append_time_ms: int  # -1 unless the batch was stamped LogAppendTime
    log_start_offset: int


@dataclass
class PartitionLogConfig:
    max_message_bytes: int = 1048588
    log_append_time: bool = False  # topic config message.timestamp.type=LogAppendTime
    tail_cache_bytes: int = 16 << 20
    snapshot_interval_batches: int = 1000
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    max_timestamp_diff_ms: int | None = None
    index_append_interval: int = 8
    replay_chunk_entries: int = 256
    compacted: bool = False  # cleanup.policy has "compact": records need keys
    # How long a batch ahead of its producer's sequence waits for the earlier ones (see append):
    # short, because a batch still ahead is refused retriably, and a client whose earlier batch
    # was refused resends it only once this one is answered (librdkafka drains first)
    sequence_gap_wait_s: float = 0.25


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """Open with `await PartitionLog.open(...)`; the topic service owns instances."""

    def __init__(
        self, name: str, ml: Any, store: MetadataStore, state_path: str, config: PartitionLogConfig
    ) -> None:
        self.name = name
        self.ledger = ml
        self._store = store
        self._state_path = state_path
        self.config = config
        self.log_start_offset = 0
        self.high_watermark = 0
        self._next_offset = 0
        self._state_version = -1
        self._producers = ProducerStateManager()
        self.offset_index = OffsetIndex(config.index_append_interval)
        self._cache = BatchTailCache(config.tail_cache_bytes)
        self._timestamps = TimestampSearch(self)
        self.read_hints: dict[int, Position] = {}  # next offset -> its entry, for sequential reads
        self._data_event = trio.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._closing = False  # close() started: no new append may take an offset
        self._close_done = trio.Event()  # close() has finished
        self._sequence_moved = trio.Event()  # set when a producer's state may have advanced
        self._sequence_waiters = 0
        self._batches_since_snapshot = 0
        self._snapshot_running = False
        self._pending_snapshot: tuple[int, dict[str, object]] | None = None
        self._state: dict[str, Any] = {}
        self._state_lock = trio.Lock()
        # idle unloading (TopicService.run_unloader): the topic service's use tick when this
        # log was last handed out, reads from the ledger under way, and background passes
        # (compaction, offload) that hold it
        self.used_tick = 0
        self._reads_in_flight = 0
        self._pins = 0

    # --- opening ---------------------------------------------------------------------------------

    @staticmethod
    def initial_state() -> dict[str, Any]:
        """The state node of a partition that has never been written."""
        return {"format": STATE_FORMAT_VERSION, "log_start_offset": 0, "producer_snapshot": None}

    @classmethod
    async def open(
        cls, name: str, ml: Any, store: MetadataStore, state_path: str,
        config: PartitionLogConfig | None = None, *, state_created: bool = False,
    ) -> PartitionLog:
        """state_created: `ml` was created just now together with the state node holding
        initial_state() (version 0), so there is nothing to read nor anybody to fence."""
        plog = cls(name, ml, store, state_path, config or PartitionLogConfig())
        if state_created:
            plog._state, plog._state_version = cls.initial_state(), 0
        else:
            await plog._load()
        return plog

    async def _load(self) -> None:
        try:
            data, stat = await self._store.get(self._state_path)
            state = json.loads(data)
            if state.get("format") != STATE_FORMAT_VERSION:
                raise KafkaStorageError(f"{self._state_path}: unknown format {state.get('format')}")
            # Claim the node: bump its version so a deposed owner's next CAS fails.
            claimed = await self._store.set(self._state_path, data, stat.version)
            self._state_version = claimed.version
        except NoNodeError:
            state = self.initial_state()
            await self._store.create(
                self._state_path, json.dumps(state).encode(), make_parents=True
            )
            self._state_version = 0
        self._state = state
        stored_start = int(state["log_start_offset"])
        # Compaction may remove the last records below its point (expired tombstones): the
        # log end never goes below what it compacted through.
        end = max(stored_start, int(state.get("cleaned_through", 0)))
        last = self.ledger.last_confirmed
        if last is not None:
            end = max(end, (await self.read_header(last)).last_offset + 1)
        first_position = self.ledger.first_position
        start = stored_start
        if first_position is not None and last is not None:
            start = max(start, await self._first_offset_at_load(first_position, stored_start))
        else:
            start = end
        self.log_start_offset = min(start, end)
        self.high_watermark = self._next_offset = end
        await self._rebuild_producer_state(state.get("producer_snapshot"))
        log.info("%s: opened, offsets [%d, %d), %d producers", self.name,
                 self.log_start_offset, end, len(self._producers))

    async def _first_offset_at_load(self, first: Position, stored_start: int) -> int:
        """The base offset of the log's first entry, or the stored log start when that entry
        is in a missing or corrupt offloaded object: the partition still opens (its newer
        ledgers served, appends taken) and reads of the damaged range are answered as such."""
        try:
            return (await self.read_header(first)).base_offset
        except Exception as exc:
            if storage_fault_of(exc) is not StorageFault.DAMAGED:
                raise
            log.warning("%s: first entry unreadable (%s); log start kept at the stored %d",
                        self.name, exc, stored_start)
            return stored_start

    async def _rebuild_producer_state(self, snapshot: object) -> None:
        replay_from = 0
        restored = ProducerStateManager.restore(snapshot) if snapshot else None
        if restored is not None and restored[1] <= self.high_watermark:
            self._producers, replay_from = restored
        start = max(replay_from, self.log_start_offset)
        if start >= self.high_watermark:
            return
        try:
            position = await self.locate(start)
        except Exception as exc:  # the search met a damaged object: replay from the start
            if storage_fault_of(exc) is not StorageFault.DAMAGED:
                raise
            position = self.ledger.first_position
        sizes = {info.ledger_id: info.entries for info in self.ledger.ledgers}
        now = _now_ms()
        while position is not None:
            # one ledger per read, so that a damaged object fails only its own ledger's read
            left = sizes.get(position.ledger_id, 0) - position.entry_id
            try:
                entries = await self.ledger.read(
                    position, max(1, min(left, self.config.replay_chunk_entries)))
            except Exception as exc:
                if storage_fault_of(exc) is not StorageFault.DAMAGED or left < 1:
                    raise
                log.warning("%s: producer state replay skips ledger %d: %s",
                            self.name, position.ledger_id, exc)
                position = self.ledger.next_position(
                    Position(position.ledger_id, sizes[position.ledger_id] - 1))
                continue
            if not entries:
                break
            for entry in entries:
                header = parse_header(entry.data)
                self.offset_index.record_read(
                    entry.position, header.base_offset, header.last_offset)
                if header.base_offset >= replay_from:
                    self._producers.replay(
                        header, now, entry.data if header.is_control else None
                    )
                    # still after the last snapshot: counted, or each open and close without a
                    # state write (a short replay) would leave the next open a longer one
                    self._batches_since_snapshot += 1
            position = self.ledger.next_position(entries[-1].position)

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
                    or self._sequence_waiters or self._pins or self._snapshot_running
                    or self._state_lock.locked()
                    or self._data_event.statistics().tasks_waiting)

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

    async def append(
        self, records: bytes | memoryview, *, timestamp_type_log_append: bool = False
    ) -> AppendResult:
        self._check_usable()
        data: bytes | bytearray | memoryview = records
        if records_magic(records) < 2:
            data = convert_legacy_to_batch(records)  # one batch: appended all or nothing
        batches = list(iter_batches(data))
        if len(batches) != 1:
            raise InvalidRecordError(
                f"a produce must carry exactly one v2 batch, got {len(batches)}"
            )
        header, view = batches[0]
        if header.is_control:
            raise InvalidRecordError("control batches are written by the transaction coordinator")
        if header.size > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}"
            )
        now = _now_ms()
        validate_batch(
            header, view, now_ms=now, max_timestamp_diff_ms=self.config.max_timestamp_diff_ms
        )
        if self.config.compacted:
            self._refuse_keyless(header, view)
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
        if self._sequence_waiters:
            self._wake_sequence_waiters()
        await self._store_batch(header, stored)
        return AppendResult(base, now if log_append else -1, self.log_start_offset)

    async def _wait_for_earlier_batches(self, header: BatchHeader) -> None:
        """Let a batch that is ahead of its producer's last sequence wait (at most
        `sequence_gap_wait_s`) for the earlier batches still on their way.

        An idempotent client pipelines up to 5 batches per partition and treats
        OUT_OF_ORDER_SEQUENCE_NUMBER on the oldest batch it has not seen acknowledged as
        fatal.  If a later batch were judged before an earlier one that is already in this
        broker (two requests racing to the partition), the client would see the earlier one
        acknowledged and then the later one refused: a fatal error for a batch that was in
        order all along.  Batches pipelined on one connection are judged in arrival order
        (tests/kafka_server/test_idempotent_pipelining.py), but they do wait here when an
        earlier one was refused before it was stored (a partition hand-off: the new owner not
        ready yet) and will be sent again.  A batch still ahead after the wait is refused
        with NOT_ENOUGH_REPLICAS (retriable, not stored), never OUT_OF_ORDER_SEQUENCE_NUMBER:
        librdkafka answers that one by bumping its producer epoch and sending everything
        unacknowledged again under new sequences, so a batch that was stored but answered
        with an error (the old owner's ownership ended during its append) would be stored
        twice (tests/kafka_server/test_idempotent_retry_gap.py).  A client that dropped the
        earlier batch for good renumbers the later ones itself (librdkafka bumps the epoch
        on the permanent failure, the Java producer adjusts its in-flight sequences)."""
        self._sequence_waiters += 1
        try:
            with trio.move_on_after(self.config.sequence_gap_wait_s):
                while self._producers.awaits_earlier_batches(header):
                    await self._sequence_moved.wait()
                    self._check_usable()
        finally:
            self._sequence_waiters -= 1
        self._check_usable()

    def _wake_sequence_waiters(self) -> None:
        event, self._sequence_moved = self._sequence_moved, trio.Event()
        event.set()

    def _refuse_keyless(self, header: BatchHeader, view: memoryview) -> None:
        keyless = keyless_record_indexes(header, view)
        if keyless:
            message = f"Compacted topic cannot accept message without key in {self.name}."
            error = InvalidRecordError(
                f"One or more records have been rejected: {len(keyless)} without a key"
            )
            error.record_errors = tuple((i, message) for i in keyless)
            raise error

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT or ABORT control batch for the producer; its offset once durable."""
        self._check_usable()
        self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = _now_ms()
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
        if self._sequence_waiters:
            self._wake_sequence_waiters()
        await self._store_batch(header, stored)
        return base

    async def _store_batch(self, header: BatchHeader, stored: bytes) -> None:
        """Append a batch whose offset and producer state are assigned; returns once durable."""
        base = header.base_offset
        last = base + header.last_offset_delta
        self._next_offset = last + 1
        self._batches_since_snapshot += 1
        if (self._batches_since_snapshot >= self.config.snapshot_interval_batches
                and self._pending_snapshot is None):
            self._capture_snapshot()  # state after [0, next offset): written once all durable
        self._cache.put(base, last, stored)
        try:
            with trio.CancelScope(shield=True):
                position = await self.ledger.append(stored)
        except BaseException as exc:
            self._fail(exc)
            if isinstance(exc, ManagedLedgerFencedError):
                raise NotLeaderOrFollowerError(f"{self.name} is owned elsewhere now") from exc
            if storage_fault_of(exc) is StorageFault.UNAVAILABLE:  # outcome unknown: retry
                raise NotEnoughReplicasAfterAppendError(
                    f"{self.name}: append not acknowledged: {exc!r}") from exc
            if isinstance(exc, Exception):
                raise KafkaStorageError(f"{self.name}: append failed: {exc!r}") from exc
            raise
        if self._failure is not None:
            # An earlier batch failed while this one was in flight: its offsets may be a hole
            # below this batch, so neither the high watermark nor a producer snapshot may move
            # past it. Fail this batch too; the client retries on a fresh log, where the
            # producer state rebuilt from the log decides what is a duplicate.
            raise NotEnoughReplicasAfterAppendError(
                f"{self.name}: an earlier append failed") from self._failure
        self.offset_index.record_append(position, base, last)
        if not header.is_control:
            self._timestamps.on_append(header, base)
        if last + 1 > self.high_watermark:
            self.high_watermark = last + 1
            self._wake_readers()
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
        self._wake_sequence_waiters()

    def _wake_readers(self) -> None:
        event, self._data_event = self._data_event, trio.Event()
        event.set()

    async def _wait_durable(self, last_offset: int) -> None:
        while self.high_watermark <= last_offset:
            self._check_usable()
            await self._data_event.wait()

    # --- producer snapshots ----------------------------------------------------------------------

    def _capture_snapshot(self) -> None:
        """Copy producer state as of the next offset (synchronously: no append can interleave).

        It is persisted only once the high watermark reaches that offset, so a snapshot never
        describes a batch that a crash could still lose."""
        self._producers.expire(_now_ms(), self.config.producer_id_expiration_ms)
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
        async with self._state_lock:
            state = dict(self._state)
            state.update(changes)
            try:
                stat = await self._store.set(
                    self._state_path, json.dumps(state).encode(), self._state_version
                )
            except (BadVersionError, NoNodeError) as exc:
                self._fail(exc)
                raise NotLeaderOrFollowerError(
                    f"{self.name}: partition state changed by another owner"
                ) from exc
            self._state = state
            self._state_version = stat.version

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
            return await self._read_stored(offset, hw, max_bytes)
        finally:
            self._reads_in_flight -= 1

    async def _read_stored(self, offset: int, hw: int, max_bytes: int) -> list[bytes]:
        try:
            return await read_stored(self, offset, hw, max_bytes)
        except InvalidPositionError as exc:  # trimmed, or compacted, while we looked
            if offset < self.log_start_offset:
                raise OffsetOutOfRangeError(f"offset {offset} of {self.name} was deleted") from exc
        try:  # a compaction swapped the ledgers under the read: once more, on the new list
            return await read_stored(self, offset, hw, max_bytes)
        except InvalidPositionError as exc:
            raise OffsetOutOfRangeError(f"offset {offset} of {self.name} was deleted") from exc

    async def wait_for_data(self, offset: int, timeout_s: float, *,
                            committed: bool = False) -> None:
        """Return once data past `offset` is readable (`committed`: below the last stable
        offset), the log closes or fails, or `timeout_s` passes."""
        with trio.move_on_after(timeout_s):
            while not self._closed and self._failure is None:
                end = self.last_stable_offset if committed else self.high_watermark
                if end > offset:
                    return
                await self._data_event.wait()

    async def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        self._check_usable()
        self._reads_in_flight += 1
        try:
            return await self._timestamps.offset_for_timestamp(ts_ms)
        finally:
            self._reads_in_flight -= 1

    async def max_timestamp_offset(self) -> tuple[int, int] | None:
        self._check_usable()
        self._reads_in_flight += 1
        try:
            return await self._timestamps.max_timestamp_offset()
        finally:
            self._reads_in_flight -= 1

    # --- trimming --------------------------------------------------------------------------------

    async def delete_records_before(self, offset: int) -> int:
        """Advance the log start to `offset` (-1: the high watermark); whole ledgers below it go."""
        self._check_usable()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete before {offset}: outside [0, {self.high_watermark}]"
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        await self._set_log_start(offset)
        position = await self.locate(offset) if offset < self.high_watermark else None
        ledgers = [info.ledger_id for info in self.ledger.ledgers]
        keep_from = position.ledger_id if position is not None else ledgers[-1]
        deleted = await self.ledger.delete_ledgers_before(keep_from)
        self.offset_index.forget_ledgers(deleted)
        return self.log_start_offset

    async def apply_retention(self) -> list[int]:
        """Trim whole ledgers past retention.ms/bytes and move the log start after them."""
        self._check_usable()
        deleted = await self.ledger.trim()
        if deleted:
            self.offset_index.forget_ledgers(deleted)
            first = self.ledger.first_position
            if first is not None and self.ledger.last_confirmed is not None:
                new_start = (await self.read_header(first)).base_offset
            else:
                new_start = self.high_watermark
            if new_start > self.log_start_offset:
                await self._set_log_start(new_start)
        return deleted

    # --- compaction (gateway/topics/compactor.py rewrites the ledgers) ----------------------------

    @property
    def cleaned_through(self) -> int:
        """Offsets below this were compacted (the cleaner's checkpoint; 0: never)."""
        return int(self._state.get("cleaned_through", 0))

    async def record_cleaned_through(self, offset: int) -> None:
        """Persist the compaction point BEFORE the swap that compacts up to it."""
        self._check_usable()
        if offset > self.cleaned_through:
            await self._write_state(cleaned_through=offset)

    def forget_rewritten(self, ledger_ids: list[int], cleaned_through: int) -> None:
        """Drop what this log remembers of swapped-out ledgers and of batches below the
        compaction point (the tail cache may still hold their uncompacted bytes)."""
        self.offset_index.forget_ledgers(ledger_ids)
        self.read_hints.clear()
        self._cache.truncate_before(cleaned_through)
        self._timestamps.truncate_before(cleaned_through)

    async def _set_log_start(self, offset: int) -> None:
        await self._write_state(log_start_offset=offset)
        self.log_start_offset = offset
        self._cache.truncate_before(offset)
        self.read_hints.clear()
        self._producers.truncate_before(offset)
        self._timestamps.truncate_before(offset)

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
        self._wake_sequence_waiters()
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
            self._wake_sequence_waiters()
            with trio.CancelScope(shield=True):
                try:
                    await self.ledger.close()
                finally:
                    self._close_done.set()


__all__ = ["AppendResult", "KafkaProtocolError", "PartitionLog", "PartitionLogConfig"]
