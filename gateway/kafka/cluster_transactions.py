"""Kafka transactions in a cluster: one TransactionCoordinator per owned transaction partition.

A transactional id belongs to coordinator partition crc32(id) mod N ("__transaction_state", i)
(gateway/cluster/ownership.py); each partition keeps its transaction state in its own compacted
log, the
managed ledger "__system/transactions/__transaction_state-<i>", so whoever owns the partition
coordinates its ids.  `ClusterTransactionCoordinator` is a bundle extension
(gateway/process/cluster_broker.py):
acquiring a bundle opens the logs of its transaction partitions (fencing the previous owner's
ledger) and runs the shared coordinator on each, whose load completes the Prepare* transactions
it finds exactly as a standalone restart does (Ongoing ones are aborted by their timeout or by
the producer's next InitProducerId, as in Kafka); releasing stops them and closes the logs.
Each load takes a new coordinator epoch from a metadata counter, so the partitions refuse
markers from a deposed coordinator (TRANSACTION_COORDINATOR_FENCED).

The shared coordinator is given two adapters instead of the topic service and the group
coordinator:

- `MarkerRoutes`: markers for a partition this broker owns are appended locally (and the
  ownership checked again after the append); markers for any other partition are sent to its
  owner as WriteTxnMarkers (Kafka's inter-broker request, handlers/txn_inter_broker.py), those
  to one owner coalesced into few requests (gateway/kafka/txn_marker_batching.py).  A marker
  is never appended by a broker that does not own the partition: opening its log would fence
  the owner.
- `OffsetRoutes`: when a transaction ends, each of its groups is settled at the group's
  coordinator (committed offsets applied, aborted ones dropped); when that is another broker
  they are sent to it as a TxnOffsetCommit with producer id -1 ("the transaction ended for
  this group: apply these offsets", a form no client sends; handlers/txn_inter_broker.py
  serves it to cluster brokers only).

Clients send TxnOffsetCommit to the *group* coordinator (as in Kafka); when that broker does
not coordinate the transactional id it forwards the offsets (membership already checked by its
handler) to the transaction coordinator, which keeps them durably until the transaction ends,
and remembers their partitions as unstable (KIP-447) until the transaction settles them.

This module must never serve a transactional id whose partition this broker does not own, and
never append a marker to a partition it does not own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from typing import Any, cast

import trio

from gateway.cluster.bundle_placement import TXN_TOPIC
from gateway.cluster.ownership import OwnershipService
from gateway.cluster.peer_client import PeerClient, PeerSecurity
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.coordinator.partition_loader import CoordinatorPartitionLoader
from gateway.coordinator.transaction_store import LedgerTransactionStore, transaction_ledger_name
from gateway.kafka.txn_marker_batching import PendingMarker, RemoteMarkerWriter
from gateway.kafka.txn_marker_batching import raise_for_partition_code as _raise_for
from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.managed_ledger.types import (
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka.broker_api import BrokerEndpoint, TopicServiceApi
from protocols.kafka.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    KafkaProtocolError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
)
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.handlers.txn_inter_broker import (
    APPLY_OFFSETS_PRODUCER_ID,
)
from protocols.kafka.transaction_coordinator import (
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionMetadata,
)

log = logging.getLogger("ledgerwire.transactions.cluster")

COORDINATOR_EPOCH_PATH = "/ledgerwire/transactions/coordinator-epoch"
TXN_OFFSET_COMMIT = 28
# transaction.max.timeout.ms: a forwarded offset older than the longest transaction is settled
FORWARDED_OFFSETS_MAX_AGE_S = 900.0
LOAD_RETRY_INTERVAL_S = 1.0  # a partition whose load failed is tried again on demand, this often


def cluster_coordinator_config() -> TransactionCoordinatorConfig:
    """A cluster's coordinators retry unwritten markers sooner than a standalone's: a marker
    for another broker's partition fails for as long as that partition fails over."""
    return TransactionCoordinatorConfig(abort_check_interval_s=2.0)


class _LocalMarkers:
    """A locally owned partition's log, as the coordinator writes markers to it."""

    def __init__(self, plog: Any, ownership: OwnershipService, topic: str, partition: int) -> None:
        self._plog = plog
        self._ownership = ownership
        self._topic, self._partition = topic, partition

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        offset = int(await self._plog.write_txn_marker(producer_id, producer_epoch, commit,
                                                       coordinator_epoch))
        if not self._ownership.is_local(self._topic, self._partition):
            raise NotLeaderOrFollowerError(f"{self._topic}-{self._partition} moved while the "
                                           "marker was written")
        return offset


class _RemoteMarkers:
    """A partition owned by another broker: its markers go to it through the writer."""

    def __init__(self, writer: RemoteMarkerWriter, owner: BrokerEndpoint, topic: str,
                 partition: int) -> None:
        self._writer = writer
        self._owner = owner
        self._topic, self._partition = topic, partition

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        await self._writer.write(self._owner, PendingMarker(
            producer_id, producer_epoch, commit, coordinator_epoch, self._topic,
            self._partition))
        return -1  # the offset is the owner's to know


class MarkerRoutes:
    """The topic service as the coordinator sees it, with markers routed to the owners."""

    def __init__(self, topics: TopicServiceApi, ownership: OwnershipService,
                 peers: PeerClient) -> None:
        self._topics = topics
        self._ownership = ownership
        self._peers = peers
        self.remote = RemoteMarkerWriter(peers)

    def topics(self) -> Mapping[str, Any]:
        return self._topics.topics()

    async def allocate_producer_id(self) -> int:
        return await self._topics.allocate_producer_id()

    async def partition(self, topic: str, partition: int) -> Any:
        if self._ownership.is_local(topic, partition):
            plog = await self._topics.partition(topic, partition)
            return _LocalMarkers(plog, self._ownership, topic, partition)
        owner = self._ownership.owner_of(topic, partition)
        if owner is None or owner.node_id == self._ownership.me.node_id:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no ready owner yet")
        return _RemoteMarkers(self.remote, owner, topic, partition)


class OffsetRoutes:
    """The group side of transactional offsets: a transaction's end settles each of its groups
    at the group's coordinator, wherever it is (committed offsets applied, aborted ones
    dropped); and, on the group's coordinator, the partitions whose offsets were forwarded to
    another broker's transaction coordinator and are not settled yet (KIP-447's unstable
    offsets).  That record lives in memory: a group coordinator that fails over forgets it,
    and entries older than the longest transaction are dropped."""

    def __init__(self, groups: ClusterGroupCoordinator, ownership: OwnershipService,
                 peers: PeerClient, clock: Any = time.monotonic) -> None:
        self._groups = groups
        self._ownership = ownership
        self._peers = peers
        self._clock = clock
        # group id -> transactional id -> (when forwarded, partitions)
        self._forwarded: dict[str, dict[str, tuple[float, set[OffsetKey]]]] = {}

    async def settle_transactional_offsets(
        self, transactional_id: str, group_id: str,
        offsets: Mapping[OffsetKey, CommittedOffset], commit: bool,
    ) -> None:
        """Called by the transaction coordinator when the transaction ends."""
        if self._ownership.coordinator_is_local(0, group_id):
            if commit and offsets:
                await self._groups.apply_transactional_offsets(group_id, offsets)
            self.settled(group_id, transactional_id)
            return
        owner = self._ownership.coordinator_owner(0, group_id)
        if owner is None or owner.node_id == self._ownership.me.node_id:
            raise NotCoordinatorError(f"group {group_id!r} has no ready coordinator yet")
        await send_txn_offset_commit(self._peers, owner, transactional_id,
                                     APPLY_OFFSETS_PRODUCER_ID, -1, group_id,
                                     offsets if commit else {})

    def forwarded(self, group_id: str, transactional_id: str,
                  partitions: Iterable[OffsetKey]) -> None:
        now = self._clock()
        by_txn = self._forwarded.setdefault(group_id, {})
        _, earlier = by_txn.get(transactional_id, (now, set()))
        by_txn[transactional_id] = (now, earlier | set(partitions))

    def settled(self, group_id: str, transactional_id: str) -> None:
        by_txn = self._forwarded.get(group_id)
        if by_txn is not None:
            by_txn.pop(transactional_id, None)
            if not by_txn:
                del self._forwarded[group_id]

    def unsettled(self, group_id: str) -> set[OffsetKey]:
        oldest = self._clock() - FORWARDED_OFFSETS_MAX_AGE_S
        by_txn = self._forwarded.get(group_id, {})
        for txn_id in [t for t, (since, _) in by_txn.items() if since < oldest]:
            self.settled(group_id, txn_id)
        return set().union(*(parts for _, parts in by_txn.values()))


async def send_txn_offset_commit(peers: PeerClient, to: BrokerEndpoint, transactional_id: str,
                                 producer_id: int, producer_epoch: int, group_id: str,
                                 offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
    """A TxnOffsetCommit (v3, no member check: the sender did it) to another broker."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), o in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": o.offset,
            "committed_leader_epoch": o.leader_epoch, "committed_metadata": o.metadata})
    answer = await peers.request(to.host, to.port, TXN_OFFSET_COMMIT, 3, {
        "transactional_id": transactional_id, "group_id": group_id,
        "producer_id": producer_id, "producer_epoch": producer_epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    for topic in answer.get("topics") or []:
        for part in topic.get("partitions") or []:
            _raise_for(int(part["error_code"]), f"offsets of group {group_id!r} on broker "
                       f"{to.node_id}")


class ClusterTransactionCoordinator(CoordinatorPartitionLoader[TransactionCoordinator]):
    """The transaction coordinators of the transaction partitions this broker owns."""

    _kind = "transaction partition"
    _log = log

    def __init__(self, store: MetadataStore, factory: ManagedLedgerFactory,
                 ledger_config: ManagedLedgerConfig, topics: TopicServiceApi,
                 groups: ClusterGroupCoordinator, ownership: OwnershipService,
                 nursery: trio.Nursery, peers: PeerClient,
                 config: TransactionCoordinatorConfig | None = None) -> None:
        super().__init__(nursery)
        self._store = store
        self._factory = factory
        self._ledger_config = ledger_config
        self._ownership = ownership
        self._peers = peers
        self._config = config
        self._markers = MarkerRoutes(topics, ownership, peers)
        self._offsets = OffsetRoutes(groups, ownership, peers)
        self._last_retry: dict[int, float] = {}

    # --- bundle extension --------------------------------------------------------------------

    async def acquired(self, bundle: int) -> None:
        async with trio.open_nursery() as loading:  # side by side: each has its own ledger
            for topic, partition in self._ownership.units_in_bundle(bundle):
                if topic == TXN_TOPIC:
                    loading.start_soon(self._load_partition, partition)

    async def _load_partition(self, partition: int) -> None:
        try:
            await self.start_partition(partition)
        except Exception:  # one bad partition must not keep the others unloaded
            log_failure(log, "cannot load transaction partition %d", partition,
                        bug_level=logging.ERROR)

    async def releasing(self, bundle: int) -> None:
        for topic, partition in self._ownership.units_in_bundle(bundle):
            if topic == TXN_TOPIC:
                await self.stop_partition(partition)

    # --- partition lifecycle (gateway/coordinator/partition_loader.py) ---------------------------

    def _open_partition(self, partition: int
                        ) -> tuple[TransactionCoordinator, LedgerTransactionStore]:
        store = LedgerTransactionStore(self._factory, self._ledger_config,
                                       ledger_name=transaction_ledger_name(partition))
        # MarkerRoutes has the part of the topic service the coordinator uses.
        coordinator = TransactionCoordinator(store, cast(TopicServiceApi, self._markers),
                                             self._offsets, self._config)
        return coordinator, store

    async def _prepare_partition(self, partition: int,
                                 coordinator: TransactionCoordinator) -> None:
        # A new epoch per load: partitions refuse markers of a deposed coordinator.
        coordinator.coordinator_epoch = await self._store.next_id(
            f"{COORDINATOR_EPOCH_PATH}/{partition}")

    def _loaded_log_extra(self, coordinator: TransactionCoordinator) -> dict[str, Any]:
        return {"coordinator_epoch": coordinator.coordinator_epoch,
                "transactional_ids": len(coordinator.transactions)}

    def _owns_partition(self, partition: int) -> bool:
        return self._ownership.is_local(TXN_TOPIC, partition)

    # --- routing -----------------------------------------------------------------------------

    def _for(self, transactional_id: str) -> TransactionCoordinator:
        topic, partition = self._ownership.coordinator_unit(1, transactional_id)
        if not self._ownership.is_local(topic, partition):
            raise NotCoordinatorError(
                f"transactional id {transactional_id!r} is coordinated by another broker")
        running = self._running.get(partition)
        if running is None:
            # owned but not loaded: the load is under way, or failed and is tried again now
            now = trio.current_time()
            if (not self._partition_lock(partition).locked()
                    and now - self._last_retry.get(partition, -LOAD_RETRY_INTERVAL_S)
                    >= LOAD_RETRY_INTERVAL_S):
                self._last_retry[partition] = now
                self._nursery.start_soon(self._load_if_owned, partition)
            raise CoordinatorLoadInProgressError(f"transaction partition {partition} is loading")
        return running.coordinator

    async def _call(self, transactional_id: str, call: Any) -> Any:
        """Run a coordinator call; a fenced state log (a new owner took it) reloads the
        partition and the client is told NOT_COORDINATOR, and an answer is given only while
        this broker still coordinates the id (lease valid)."""
        try:
            result = await call(self._for(transactional_id))
        except (ManagedLedgerFencedError, ManagedLedgerClosedError) as exc:
            _, partition = self._ownership.coordinator_unit(1, transactional_id)
            self._nursery.start_soon(self._reload, partition)
            raise NotCoordinatorError(f"transaction log fenced: {exc}") from exc
        self._for(transactional_id)
        return result

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_pid: int = -1, expected_epoch: int = -1) -> tuple[int, int]:
        result: tuple[int, int] = await self._call(
            transactional_id, lambda c: c.init_producer_id(transactional_id, timeout_ms,
                                                           expected_pid, expected_epoch))
        return result

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[OffsetKey],
                             verify_only: bool = False) -> dict[OffsetKey, int]:
        wanted = list(partitions)
        result: dict[OffsetKey, int] = await self._call(
            transactional_id, lambda c: c.add_partitions(transactional_id, producer_id,
                                                         producer_epoch, wanted, verify_only))
        return result

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> None:
        await self._call(transactional_id, lambda c: c.add_offsets(
            transactional_id, producer_id, producer_epoch, group_id))

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> None:
        await self._call(transactional_id, lambda c: c.end_transaction(
            transactional_id, producer_id, producer_epoch, commit))

    async def txn_offset_commit(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, group_id: str,
                                offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        """TxnOffsetCommit, received by the group's coordinator (see the module docstring)."""
        topic, partition = self._ownership.coordinator_unit(1, transactional_id)
        if self._ownership.is_local(topic, partition):
            await self._call(transactional_id, lambda c: c.txn_offset_commit(
                transactional_id, producer_id, producer_epoch, group_id, offsets))
            return
        owner = self._ownership.owner_of(topic, partition)
        if owner is None or owner.node_id == self._ownership.me.node_id:
            raise KafkaProtocolError("the transaction coordinator is moving",
                                     code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        await send_txn_offset_commit(self._peers, owner, transactional_id, producer_id,
                                     producer_epoch, group_id, offsets)
        self._offsets.forwarded(group_id, transactional_id, offsets)

    def transaction_offsets_settled(self, group_id: str, transactional_id: str) -> None:
        """The transaction coordinator (another broker) ended the transaction for the group."""
        self._offsets.settled(group_id, transactional_id)

    # --- introspection -----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self._for(transactional_id).describe(transactional_id)

    def list_transactions(self) -> list[TransactionMetadata]:
        """The transactions of every transaction partition this broker has loaded."""
        return [txn for running in self._running.values()
                for txn in running.coordinator.list_transactions()]

    def pending_offset_partitions(self, group_id: str) -> set[OffsetKey]:
        """KIP-447's unstable offsets: those of this broker's transactions, and those forwarded
        by this broker (the group's coordinator) to another's and not settled yet."""
        pending = self._offsets.unsettled(group_id)
        for running in self._running.values():
            pending |= running.coordinator.pending_offset_partitions(group_id)
        return pending


def setup_cluster_transactions(stack: AsyncExitStack, store: MetadataStore,
                               factory: ManagedLedgerFactory, ledger_config: ManagedLedgerConfig,
                               topics: TopicServiceApi, groups: ClusterGroupCoordinator,
                               ownership: OwnershipService, hooks: Any, nursery: trio.Nursery,
                               node_id: int, peer_security: PeerSecurity | None = None,
                               ) -> ClusterTransactionCoordinator:
    """The cluster broker's transaction coordinator, registered as a bundle extension on
    `hooks`; stopped (before the group coordinators, which it may still apply offsets to)
    and its peer connections closed when `stack` unwinds.  `peer_security`: TLS and the
    inter-broker SASL login for requests to other brokers (cluster_services.setup_security)."""
    peers = PeerClient(f"ledgerwire-broker-{node_id}", security=peer_security)
    stack.push_async_callback(peers.aclose)
    transactions = ClusterTransactionCoordinator(store, factory, ledger_config, topics, groups,
                                                 ownership, nursery, peers,
                                                 cluster_coordinator_config())
    hooks.add_extension(transactions)
    stack.push_async_callback(transactions.stop_all)
    return transactions
