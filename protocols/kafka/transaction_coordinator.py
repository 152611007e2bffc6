"""The transaction coordinator: transactional ids, their producer epochs and transaction states.

One `TransactionMetadata` per transactional id, moved only through `TRANSITIONS` (Kafka's
TransactionState rules):

    Empty | CompleteCommit | CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --AddPartitions--> Ongoing;  Ongoing --EndTxn--> PrepareCommit | PrepareAbort
    PrepareCommit --markers written--> CompleteCommit;  PrepareAbort --> CompleteAbort
    Empty | CompleteCommit | CompleteAbort --InitProducerId--> Empty (epoch + 1)
    Empty | CompleteCommit | CompleteAbort --expired--> Dead

InitProducerId bumps the epoch, which fences a zombie of the previous epoch; if that zombie left
a transaction Ongoing it is aborted first, with markers of the bumped epoch, so the partitions
fence the zombie's later writes too.  EndTxn logs Prepare*, writes a COMMIT/ABORT marker to
every partition of the transaction (in parallel), applies the offsets sent with
TxnOffsetCommit through the group coordinator on commit (`apply_transactional_offsets`), and
logs Complete*.  If markers cannot be written now, the Prepare* state is durable and the
background task (`run`) finishes the job; the client is answered as Kafka does once Prepare* is
durable.  The same task aborts transactions older than their timeout (bumping the epoch, so the
late producer is fenced) and forgets ids idle past `transactional_id_expiration_ms`.

Every state change is written through a `TransactionStoreApi` (the gateway backs it by a ledger)
before it takes effect, so a restarted coordinator resumes where it stopped: Prepare* states
found at load are completed.  This module must never do I/O itself, and must never answer a
client before the state its answer depends on is durable.  The states, their table and the
durable value of one transaction are transaction_state.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from protocols.kafka.broker_api import TopicServiceApi
from protocols.kafka.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaProtocolError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.transaction_state import (
    TRANSITIONS,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
)
from protocols.kafka.transaction_state import now_ms as _now_ms

log = logging.getLogger("ledgerwire.kafka.transactions")

MAX_EPOCH = 0x7FFF - 1  # Short.MaxValue - 1: one more bump would need a new producer id

_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
_PREPARING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


class TransactionStoreApi(Protocol):
    """Durable transaction state (gateway.coordinator.transaction_store.LedgerTransactionStore)."""

    async def load(self) -> dict[str, dict[str, Any]]: ...

    async def write(self, transactional_id: str, record: dict[str, Any]) -> None: ...

    async def delete(self, transactional_id: str) -> None: ...


@dataclass
class TransactionCoordinatorConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_check_interval_s: float = 10.0  # ..abort.timed.out.transaction.cleanup.interval.ms
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    marker_attempts: int = 5  # in the EndTxn request; the background task retries after that
    marker_retry_backoff_s: float = 0.2


class TransactionCoordinator:
    """See the module docstring.  `topics` gives producer ids and the partitions markers go to;
    `group_coordinator` (GroupCoordinator) applies committed transactions' offsets."""

    def __init__(
        self,
        store: TransactionStoreApi,
        topics: TopicServiceApi,
        group_coordinator: Any = None,
        config: TransactionCoordinatorConfig | None = None,
    ) -> None:
        self.config = config or TransactionCoordinatorConfig()
        self.transactions: dict[str, TransactionMetadata] = {}
        self.coordinator_epoch = 0
        self._store = store
        self._topics = topics
        self._groups = group_coordinator
        self._locks: dict[str, trio.Lock] = {}
        # transactional id -> the Prepare* transaction (pid, epoch, state) whose markers are
        # all written, so a retry of its completion does not write them again
        self._marked: dict[str, tuple[int, int, TxnState]] = {}
        self._loaded = False
        self._wakeup = trio.Event()

    # ---- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Load the durable state, then finish, time out and expire transactions until cancelled."""
        for txn_id, record in (await self._store.load()).items():
            self.transactions[txn_id] = TransactionMetadata.from_record(record)
        self._loaded = True
        log.info("transactions loaded", extra={"transactional_ids": len(self.transactions)})
        task_status.started()
        while True:
            await self.check_once()
            with trio.move_on_after(self.config.abort_check_interval_s):
                await self._wakeup.wait()
            self._wakeup = trio.Event()

    async def check_once(self, now_ms: int | None = None) -> None:
        """One pass of the background work (the tests call it directly)."""
        now = _now_ms() if now_ms is None else now_ms
        for txn_id, txn in list(self.transactions.items()):
            try:
                if txn.state in _PREPARING:
                    async with self._lock(txn_id):
                        # The table may have moved on while this pass waited for the lock
                        # (an EndTxn completed it, a new transaction began): act only on
                        # what is still Prepare*.
                        current = self.transactions.get(txn_id)
                        if current is not None and current.state in _PREPARING:
                            await self._complete(txn_id, attempts=1)
                elif txn.state is TxnState.ONGOING and now > txn.txn_start_ms + txn.timeout_ms:
                    log.info("transaction timed out, aborting", extra={"transactional_id": txn_id})
                    async with self._lock(txn_id):
                        current = self.transactions.get(txn_id)
                        if current is not None and current.state is TxnState.ONGOING:
                            await self._abort_ongoing(current, attempts=1)
                elif (txn.state in _IDLE
                      and now > txn.last_update_ms + self.config.transactional_id_expiration_ms):
                    async with self._lock(txn_id):
                        current = self.transactions.get(txn_id)
                        if current is not None and current.state in _IDLE:
                            current.moved_to(TxnState.DEAD)  # checks the table
                            await self._store.delete(txn_id)
                            del self.transactions[txn_id]
            except Exception:  # one transaction's trouble must not stop the others' work
                log.warning("transaction housekeeping failed", exc_info=True,
                            extra={"transactional_id": txn_id})

    def _lock(self, txn_id: str) -> trio.Lock:
        lock = self._locks.get(txn_id)
        if lock is None:
            lock = self._locks[txn_id] = trio.Lock()
        return lock

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise KafkaProtocolError("transaction state is loading",
                                     code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    async def _save(self, txn: TransactionMetadata) -> TransactionMetadata:
        await self._store.write(txn.transactional_id, txn.to_record())
        self.transactions[txn.transactional_id] = txn
        return txn

    # ---- InitProducerId -----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_pid: int = -1, expected_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for the transactional id, fencing earlier epochs."""
        self._check_loaded()
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms outside (0, {self.config.max_timeout_ms}]"
            )
        async with self._lock(transactional_id):
            txn = self.transactions.get(transactional_id)
            if txn is None:
                pid = await self._topics.allocate_producer_id()
                txn = TransactionMetadata(transactional_id, pid, 0, timeout_ms,
                                          last_update_ms=_now_ms())
                await self._save(txn)
                return pid, 0
            if expected_pid >= 0 and not (
                expected_pid == txn.producer_id and expected_epoch == txn.producer_epoch
            ):
                raise ProducerFencedError(
                    f"producer {expected_pid}/{expected_epoch} is not the current "
                    f"{txn.producer_id}/{txn.producer_epoch}"
                )
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                if not await self._complete(transactional_id, attempts=1):
                    raise ConcurrentTransactionsError("the previous transaction is completing")
            txn = self.transactions[transactional_id]
            if txn.state is TxnState.ONGOING:
                # A zombie (or a crashed instance) left it open: fence its epoch and abort.
                if not await self._abort_ongoing(txn, attempts=self.config.marker_attempts):
                    raise ConcurrentTransactionsError("aborting the previous transaction")
                txn = self.transactions[transactional_id]
            pid, epoch = txn.producer_id, txn.producer_epoch + 1
            if epoch > MAX_EPOCH:
                pid, epoch = await self._topics.allocate_producer_id(), 0
            txn = await self._save(txn.moved_to(
                TxnState.EMPTY, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                partitions=frozenset(), pending_offsets={}, txn_start_ms=-1,
            ))
            return txn.producer_id, txn.producer_epoch

    # ---- adding to a transaction ----------------------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int,
                 producer_epoch: int) -> TransactionMetadata:
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} is not mapped to producer {producer_id}"
            )
        if txn.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"epoch {producer_epoch} of producer {producer_id} is fenced by "
                f"{txn.producer_epoch}"
            )
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing")
        return txn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[OffsetKey],
                             verify_only: bool = False) -> dict[OffsetKey, int]:
        """Add partitions to the ongoing (or a new) transaction: error code per partition."""
        self._check_loaded()
        wanted = set(partitions)
        unknown = {tp for tp in wanted if not self._partition_exists(*tp)}
        if unknown:
            return {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                            else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        async with self._lock(transactional_id):
            txn = self._current(transactional_id, producer_id, producer_epoch)
            if verify_only:
                missing = ErrorCode.INVALID_TXN_STATE
                return {tp: 0 if (txn.state is TxnState.ONGOING and tp in txn.partitions)
                        else int(missing) for tp in wanted}
            if txn.state is TxnState.ONGOING and wanted <= txn.partitions:
                return dict.fromkeys(wanted, 0)
            await self._save(self._to_ongoing(txn, partitions=txn.partitions | wanted))
        return dict.fromkeys(wanted, 0)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        info = self._topics.topics().get(topic)
        return info is not None and 0 <= partition < info.partitions

    async def _write_marker(self, topic: str, partition: int, producer_id: int,
                            producer_epoch: int, commit: bool) -> None:
        plog = await self._topics.partition(topic, partition)
        await plog.write_txn_marker(producer_id, producer_epoch, commit, self.coordinator_epoch)

    def _to_ongoing(self, txn: TransactionMetadata, **changes: Any) -> TransactionMetadata:
        if txn.state is not TxnState.ONGOING:
            changes.setdefault("partitions", frozenset())
            changes.setdefault("pending_offsets", {})
            changes["txn_start_ms"] = _now_ms()
        return txn.moved_to(TxnState.ONGOING, **changes)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> None:
        """AddOffsetsToTxn: the group's offsets will be committed by this transaction."""
        self._check_loaded()
        async with self._lock(transactional_id):
            txn = self._current(transactional_id, producer_id, producer_epoch)
            if txn.state is TxnState.ONGOING and group_id in txn.pending_offsets:
                return
            pending = dict(txn.pending_offsets) if txn.state is TxnState.ONGOING else {}
            pending[group_id] = {}
            await self._save(self._to_ongoing(txn, pending_offsets=pending))

    async def txn_offset_commit(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, group_id: str,
                                offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        """TxnOffsetCommit: keep the offsets pending until the transaction ends."""
        self._check_loaded()
        async with self._lock(transactional_id):
            txn = self._current(transactional_id, producer_id, producer_epoch)
            if txn.state is not TxnState.ONGOING or group_id not in txn.pending_offsets:
                raise InvalidTxnStateError(
                    f"group {group_id!r} was not added to transaction {transactional_id!r}"
                )
            pending = dict(txn.pending_offsets)
            pending[group_id] = {**pending[group_id], **offsets}
            await self._save(txn.moved_to(TxnState.ONGOING, pending_offsets=pending))

    # ---- ending a transaction -------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> None:
        """EndTxn: commit or abort the ongoing transaction (idempotent for a retried EndTxn)."""
        self._check_loaded()
        async with self._lock(transactional_id):
            txn = self.transactions.get(transactional_id)
            if txn is None or txn.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"transactional id {transactional_id!r} is not mapped to {producer_id}"
                )
            if txn.producer_epoch != producer_epoch:
                raise ProducerFencedError(f"epoch {producer_epoch} is fenced by "
                                          f"{txn.producer_epoch}")
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if txn.state is done:
                return  # a retry of the EndTxn that completed it
            if txn.state is preparing:
                await self._complete(transactional_id, attempts=1)
                return
            if txn.state is not TxnState.ONGOING:
                raise InvalidTxnStateError(
                    f"EndTxn({'commit' if commit else 'abort'}) in state {txn.state.value}"
                )
            await self._save(txn.moved_to(preparing))
            if not await self._complete(transactional_id, attempts=self.config.marker_attempts):
                self._wakeup.set()  # the background task keeps trying

    async def _abort_ongoing(self, txn: TransactionMetadata, attempts: int) -> bool:
        """Fence the producer (epoch + 1) and abort its ongoing transaction."""
        epoch = txn.producer_epoch + 1
        pid = txn.producer_id
        if epoch > MAX_EPOCH:
            pid, epoch = txn.producer_id, MAX_EPOCH  # markers still fence lower epochs
        await self._save(txn.moved_to(TxnState.PREPARE_ABORT, producer_id=pid,
                                      producer_epoch=epoch))
        return await self._complete(txn.transactional_id, attempts=attempts)

    async def _complete(self, transactional_id: str, attempts: int) -> bool:
        """Write the markers of a Prepare* transaction, settle its offsets, log Complete*.

        False when something is left to retry (the background task calls again): markers not
        all written yet, or the offsets not settled (e.g. the group's coordinator is moving).
        Once Prepare* is logged the outcome is decided, so neither ever fails the EndTxn that
        asked; markers already written are not written again on the retry."""
        txn = self.transactions[transactional_id]
        if txn.state not in _PREPARING:
            return True  # completed already (by whoever held the lock before us)
        commit = txn.state is TxnState.PREPARE_COMMIT
        # Markers are remembered per decided transaction (producer id, epoch, outcome), never
        # per transactional id alone: a later transaction of the same id needs its own.
        marked = (txn.producer_id, txn.producer_epoch, txn.state)
        if self._marked.get(transactional_id) != marked:
            if not await self._write_markers(txn, commit, attempts):
                return False
            self._marked[transactional_id] = marked
        try:
            await self._settle_offsets(txn, commit)
        except Exception:  # noqa: BLE001 - retried by the background task
            log.warning("transaction offsets not settled yet; retrying", exc_info=True,
                        extra={"transactional_id": transactional_id})
            return False
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        await self._save(txn.moved_to(done, partitions=frozenset(), pending_offsets={}))
        self._marked.pop(transactional_id, None)
        log.info("transaction %s", "committed" if commit else "aborted",
                 extra={"transactional_id": transactional_id, "partitions": len(txn.partitions)})
        return True

    async def _write_markers(self, txn: TransactionMetadata, commit: bool, attempts: int) -> bool:
        remaining = set(txn.partitions)
        for attempt in range(attempts):
            failed: set[OffsetKey] = set()

            async def one(tp: OffsetKey, failed: set[OffsetKey] = failed) -> None:
                try:
                    await self._write_marker(tp[0], tp[1], txn.producer_id, txn.producer_epoch,
                                             commit)
                except UnknownTopicOrPartitionError:
                    pass  # deleted since: nothing left to mark
                except KafkaProtocolError as exc:  # an expected refusal: one line, no trace
                    log.warning("transaction marker failed: %s", exc,
                                extra={"transactional_id": txn.transactional_id,
                                       "partition": tp})
                    failed.add(tp)
                except Exception:  # noqa: BLE001 - retried; the partition may be reopening
                    log.warning("transaction marker failed", exc_info=True,
                                extra={"transactional_id": txn.transactional_id,
                                       "partition": tp})
                    failed.add(tp)

            async with trio.open_nursery() as nursery:
                for tp in sorted(remaining):
                    nursery.start_soon(one, tp)
            remaining = failed
            if not remaining:
                return True
            if attempt + 1 < attempts:
                await trio.sleep(self.config.marker_retry_backoff_s * (attempt + 1))
        return False

    async def _settle_offsets(self, txn: TransactionMetadata, commit: bool) -> None:
        # Extension point: a group coordinator with `settle_transactional_offsets` (a cluster's,
        # where the group may live on another broker) hears about every group of the
        # transaction, committed or aborted; a plain one only applies committed offsets.
        settle = getattr(self._groups, "settle_transactional_offsets", None)
        if settle is not None:
            for group_id, offsets in txn.pending_offsets.items():
                await settle(txn.transactional_id, group_id, offsets if commit else {}, commit)
        elif commit and self._groups is not None:
            for group_id, offsets in txn.pending_offsets.items():
                if offsets:
                    await self._groups.apply_transactional_offsets(group_id, offsets)

    # ---- introspection ----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def list_transactions(self) -> list[TransactionMetadata]:
        """Every transactional id this coordinator knows (ListTransactions filters them)."""
        self._check_loaded()
        return list(self.transactions.values())

    def pending_offset_partitions(self, group_id: str) -> set[OffsetKey]:
        """Partitions of `group_id` with offsets waiting in an open transaction (KIP-447: an
        OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for these)."""
        pending: set[OffsetKey] = set()
        for txn in self.transactions.values():
            if txn.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT):
                pending.update(txn.pending_offsets.get(group_id, {}))
        return pending


__all__ = [
    "IllegalTransitionError", "TRANSITIONS", "TransactionCoordinator",
    "TransactionCoordinatorConfig", "TransactionMetadata", "TransactionStoreApi", "TxnState",
]
