"""Kafka transactions on a cluster, in process: two brokers (memory metadata store,
MemoryBookKeeper, each its own topic service, group and transaction coordinators and Kafka
listener) with a shared, test-controlled ownership map.  Markers for the other broker's
partitions travel as WriteTxnMarkers over TCP and are refused by non-owners and from deposed
coordinator epochs; transactional offsets forwarded by a group coordinator on the other broker
are applied (or dropped) there when the transaction ends, and reported unstable until then; a
transactional id whose partition is elsewhere gets NOT_COORDINATOR; a transaction left in
PrepareCommit is finished by the broker that loads its partition next; a failed load is retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from gateway.cluster.bundle_placement import GROUP_TOPIC, TXN_TOPIC
from gateway.cluster.peer_client import PeerClient
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.kafka.broker import KafkaBrokerConfig
from gateway.kafka.cluster_transactions import ClusterTransactionCoordinator
from gateway.kafka.listener import serve_kafka
from gateway.process.cluster_broker import ClusterKafkaBroker
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka import record_batch as rb
from protocols.kafka.broker_api import BrokerEndpoint
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.group_coordinator import CommittedOffset, CoordinatorConfig
from protocols.kafka.transaction_coordinator import TxnState

TOPIC = "t"
TXN_LOCAL_TO_1 = "alpha"  # transaction partition 0
TXN_LOCAL_TO_2 = "beta"  # transaction partition 1


@dataclass
class OwnerMap:
    """Which node owns each unit (topic, partition); shared by both brokers' views."""

    owners: dict[tuple[str, int], int | None] = field(default_factory=dict)
    endpoints: dict[int, BrokerEndpoint] = field(default_factory=dict)

    def owner(self, topic: str, partition: int) -> int | None:
        if (topic, partition) in self.owners:
            return self.owners[(topic, partition)]
        return 1 if partition % 2 == 0 else 2


class MapOwnership:
    """OwnershipService's answers for one broker, from an OwnerMap.  Bundle b holds exactly
    the coordinator partition b of each kind (groups, transactions)."""

    def __init__(self, owners: OwnerMap, node_id: int) -> None:
        self.owners = owners
        self.node_id = node_id

    @property
    def me(self) -> BrokerEndpoint:
        return self.owners.endpoints[self.node_id]

    def live_brokers(self) -> list[BrokerEndpoint]:
        return list(self.owners.endpoints.values())

    def listed_brokers(self) -> list[BrokerEndpoint]:
        return self.live_brokers()

    def note_asked(self, topics: Any) -> None:
        self.asked = set(topics)

    async def until_local(self, topic: str, partition: int, timeout_s: float) -> bool:
        return self.is_local(topic, partition)

    def is_local(self, topic: str, partition: int) -> bool:
        return self.owners.owner(topic, partition) == self.node_id

    def serves_partition(self, topic: str, partition: int) -> bool:
        return self.is_local(topic, partition)  # bundles load at once here

    async def until_serving(self, topic: str, partition: int, timeout_s: float) -> bool:
        return self.is_local(topic, partition)

    def owner_of(self, topic: str, partition: int) -> BrokerEndpoint | None:
        owner = self.owners.owner(topic, partition)
        return self.owners.endpoints.get(owner) if owner is not None else None

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        if key_type == 1:
            return TXN_TOPIC, 0 if key.startswith("a") else 1
        return GROUP_TOPIC, 0 if key.startswith("a") else 1

    def coordinator_owner(self, key_type: int, key: str) -> BrokerEndpoint | None:
        return self.owner_of(*self.coordinator_unit(key_type, key))

    def coordinator_is_local(self, key_type: int, key: str) -> bool:
        return self.is_local(*self.coordinator_unit(key_type, key))

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        return [(GROUP_TOPIC, bundle), (TXN_TOPIC, bundle)]


@dataclass
class Node:
    node_id: int
    topics: TopicService
    groups: ClusterGroupCoordinator
    transactions: ClusterTransactionCoordinator
    ownership: MapOwnership

    async def acquire(self, bundle: int) -> None:
        await self.groups.start_partition(bundle)
        await self.transactions.acquired(bundle)

    async def release(self, bundle: int) -> None:
        await self.transactions.releasing(bundle)
        await self.groups.stop_partition(bundle)


@asynccontextmanager
async def node(store: MetadataStore, factory: ManagedLedgerFactory, owners: OwnerMap,
               node_id: int) -> AsyncIterator[Node]:
    topics = TopicService(store, factory, TopicServiceConfig(auto_create_topics=False))
    await topics.load()
    ownership = MapOwnership(owners, node_id)
    peers = PeerClient(f"test-broker-{node_id}")
    try:
        async with trio.open_nursery() as nursery:
            groups = ClusterGroupCoordinator(factory, None, ownership,  # type: ignore[arg-type]
                                             nursery, CoordinatorConfig())
            transactions = ClusterTransactionCoordinator(
                store, factory, None, topics, groups, ownership,  # type: ignore[arg-type]
                nursery, peers)
            broker = ClusterKafkaBroker(
                topics, KafkaBrokerConfig(broker_id=node_id, advertised_host="127.0.0.1"),
                group_coordinator=groups, transaction_coordinator=transactions,
                ownership=ownership)  # type: ignore[arg-type]
            address = await nursery.start(serve_kafka, broker, "127.0.0.1", 0)
            owners.endpoints[node_id] = BrokerEndpoint(node_id, "127.0.0.1", address.port)
            yield Node(node_id, topics, groups, transactions, ownership)
            with trio.CancelScope(shield=True):
                await transactions.stop_all()
                await groups.stop_all()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await peers.aclose()
            await topics.close()


@asynccontextmanager
async def two_brokers() -> AsyncIterator[tuple[Node, Node, OwnerMap]]:
    store = await open_store("memory:")
    owners = OwnerMap()
    try:
        async with MemoryBookKeeper(store) as bookkeeper:
            factory = ManagedLedgerFactory(store, bookkeeper)
            async with node(store, factory, owners, 1) as one, \
                    node(store, factory, owners, 2) as two:
                await one.topics.create_topic(TOPIC, 4)
                await two.topics.refresh_topic(TOPIC)
                await one.acquire(0)
                await two.acquire(1)
                yield one, two, owners
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return rb.build_batch([(None, value)], producer_id=pid, producer_epoch=epoch,
                          base_sequence=seq, is_transactional=True)


async def produce_in_txn(nodes: dict[int, Node], owners: OwnerMap, pid: int,
                         epoch: int) -> None:
    """One transactional record to every partition of TOPIC, each on its owner."""
    for p in range(4):
        owner = owners.owner(TOPIC, p)
        assert owner is not None
        plog = await nodes[owner].topics.partition(TOPIC, p)
        await plog.append(txn_batch(pid, epoch, 0, b"v%d" % p))


async def open_transactions(nodes: dict[int, Node], owners: OwnerMap) -> list[int]:
    """The partitions whose last stable offset is behind their high watermark."""
    unstable = []
    for p in range(4):
        owner = owners.owner(TOPIC, p)
        assert owner is not None
        plog = await nodes[owner].topics.partition(TOPIC, p)
        if plog.last_stable_offset < plog.high_watermark:
            unstable.append(p)
    return unstable


async def test_commit_writes_markers_on_both_brokers_and_only_owners_append() -> None:
    async with two_brokers() as (one, two, owners):
        nodes = {1: one, 2: two}
        pid, epoch = await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        codes = await one.transactions.add_partitions(TXN_LOCAL_TO_1, pid, epoch,
                                                      [(TOPIC, p) for p in range(4)])
        assert set(codes.values()) == {0}
        await produce_in_txn(nodes, owners, pid, epoch)
        assert await open_transactions(nodes, owners) == [0, 1, 2, 3]
        await one.transactions.end_transaction(TXN_LOCAL_TO_1, pid, epoch, True)
        assert await open_transactions(nodes, owners) == []
        state = one.transactions.describe(TXN_LOCAL_TO_1)
        assert state is not None and state.state is TxnState.COMPLETE_COMMIT
        # broker 1 never opened broker 2's partitions (that would fence their owner)
        assert set(one.topics.open_partitions()) == {(TOPIC, 0), (TOPIC, 2)}
        assert set(two.topics.open_partitions()) == {(TOPIC, 1), (TOPIC, 3)}
        plog = await two.topics.partition(TOPIC, 1)
        assert plog.aborted_transactions(0, plog.high_watermark) == []


async def test_abort_marks_the_other_brokers_partitions_aborted() -> None:
    async with two_brokers() as (one, two, owners):
        nodes = {1: one, 2: two}
        pid, epoch = await two.transactions.init_producer_id(TXN_LOCAL_TO_2, 60_000)
        await two.transactions.add_partitions(TXN_LOCAL_TO_2, pid, epoch,
                                              [(TOPIC, p) for p in range(4)])
        await produce_in_txn(nodes, owners, pid, epoch)
        await two.transactions.end_transaction(TXN_LOCAL_TO_2, pid, epoch, False)
        assert await open_transactions(nodes, owners) == []
        plog = await one.topics.partition(TOPIC, 0)
        assert plog.aborted_transactions(0, plog.high_watermark) == [(pid, 0)]


async def test_a_transactional_id_of_another_broker_is_not_coordinated_here() -> None:
    async with two_brokers() as (one, two, owners):
        with pytest.raises(KafkaProtocolError) as refused:
            await two.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        assert refused.value.code is ErrorCode.NOT_COORDINATOR
        await one.release(0)
        assert one.transactions.loaded_partitions() == set()
        with pytest.raises(KafkaProtocolError) as loading:  # owned, not loaded (yet)
            await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        assert loading.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        owners.owners[(TXN_TOPIC, 0)] = None
        with pytest.raises(KafkaProtocolError) as gone:
            await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        assert gone.value.code is ErrorCode.NOT_COORDINATOR


class FailingOnce:
    """A metadata store whose next `next_id` fails (a ZooKeeper hiccup during a load)."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.failed = False

    async def next_id(self, path: str) -> int:
        if not self.failed:
            self.failed = True
            raise OSError("connection loss")
        return await self.inner.next_id(path)


async def test_a_failed_load_is_retried_when_a_client_asks() -> None:
    async with two_brokers() as (one, _, _owners):
        await one.transactions.releasing(0)
        one.transactions._store = FailingOnce(one.transactions._store)  # type: ignore[assignment]
        await one.transactions.acquired(0)  # logs the failure; nothing loaded
        assert one.transactions.loaded_partitions() == set()
        with pytest.raises(KafkaProtocolError) as loading:
            await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        assert loading.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        with trio.fail_after(5):
            while True:
                if one.transactions.loaded_partitions() == {0}:
                    break
                await trio.sleep(0.01)
        assert (await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000))[1] == 0


async def test_offsets_reach_a_group_coordinator_on_the_other_broker() -> None:
    async with two_brokers() as (one, two, _):
        group = "bgroup"  # group partition 1: broker 2; the transaction is on broker 1
        pid, epoch = await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        await one.transactions.add_offsets(TXN_LOCAL_TO_1, pid, epoch, group)
        offsets = {(TOPIC, 1): CommittedOffset(42, -1, "m", 0)}
        # the client sends TxnOffsetCommit to the group coordinator: broker 2 forwards it
        await two.transactions.txn_offset_commit(TXN_LOCAL_TO_1, pid, epoch, group, offsets)
        pending = one.transactions.describe(TXN_LOCAL_TO_1)
        assert pending is not None
        assert {k: (o.offset, o.metadata) for k, o in pending.pending_offsets[group].items()} \
            == {(TOPIC, 1): (42, "m")}
        assert two.groups.fetch_offsets(group, None) == {}
        # KIP-447: the group's coordinator answers these as unstable until the end
        assert two.transactions.pending_offset_partitions(group) == {(TOPIC, 1)}
        await one.transactions.end_transaction(TXN_LOCAL_TO_1, pid, epoch, True)
        assert two.groups.fetch_offsets(group, None)[(TOPIC, 1)].offset == 42
        assert two.transactions.pending_offset_partitions(group) == set()


async def test_aborted_offsets_are_dropped_and_settled_on_the_other_broker() -> None:
    async with two_brokers() as (one, two, _):
        group = "bgroup"
        pid, epoch = await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        await one.transactions.add_offsets(TXN_LOCAL_TO_1, pid, epoch, group)
        await two.transactions.txn_offset_commit(TXN_LOCAL_TO_1, pid, epoch, group,
                                                 {(TOPIC, 3): CommittedOffset(9, -1, None, 0)})
        assert two.transactions.pending_offset_partitions(group) == {(TOPIC, 3)}
        await one.transactions.end_transaction(TXN_LOCAL_TO_1, pid, epoch, False)
        assert two.transactions.pending_offset_partitions(group) == set()
        assert two.groups.fetch_offsets(group, None) == {}


async def test_the_next_owner_completes_a_prepared_commit_on_load() -> None:
    async with two_brokers() as (one, two, owners):
        nodes = {1: one, 2: two}
        pid, epoch = await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        await one.transactions.add_partitions(TXN_LOCAL_TO_1, pid, epoch,
                                              [(TOPIC, p) for p in range(4)])
        await produce_in_txn(nodes, owners, pid, epoch)
        owners.owners[(TOPIC, 1)] = None  # partition 1 has no owner: its marker must wait
        await one.transactions.end_transaction(TXN_LOCAL_TO_1, pid, epoch, True)
        state = one.transactions.describe(TXN_LOCAL_TO_1)
        assert state is not None and state.state is TxnState.PREPARE_COMMIT
        # broker 1 goes; broker 2 takes transaction partition 0 and partition 1 back
        await one.release(0)
        owners.owners[(TXN_TOPIC, 0)] = 2
        owners.owners[(GROUP_TOPIC, 0)] = 2
        owners.owners[(TOPIC, 1)] = 2
        await two.acquire(0)
        with trio.fail_after(10):
            while True:
                state = two.transactions.describe(TXN_LOCAL_TO_1)
                if state is not None and state.state is TxnState.COMPLETE_COMMIT:
                    break
                await trio.sleep(0.05)
        assert await open_transactions(nodes, owners) == []
        plog = await two.topics.partition(TOPIC, 1)
        assert plog.aborted_transactions(0, plog.high_watermark) == []


async def test_a_reloaded_partition_takes_a_higher_coordinator_epoch() -> None:
    async with two_brokers() as (one, two, owners):
        first = one.transactions._running[0].coordinator.coordinator_epoch
        await one.release(0)
        owners.owners[(TXN_TOPIC, 0)] = 2
        owners.owners[(GROUP_TOPIC, 0)] = 2
        await two.acquire(0)
        assert two.transactions._running[0].coordinator.coordinator_epoch > first


async def test_write_txn_markers_only_by_owners_and_newest_coordinator_epoch() -> None:
    async with two_brokers() as (one, two, owners):
        nodes = {1: one, 2: two}
        pid, epoch = await one.transactions.init_producer_id(TXN_LOCAL_TO_1, 60_000)
        await one.transactions.add_partitions(TXN_LOCAL_TO_1, pid, epoch,
                                              [(TOPIC, p) for p in range(4)])
        await produce_in_txn(nodes, owners, pid, epoch)
        peers = PeerClient("test")
        try:
            async def marker(to: int, partition: int, coordinator_epoch: int) -> int:
                endpoint = owners.endpoints[to]
                answer = await peers.request(endpoint.host, endpoint.port, 27, 1, {"markers": [{
                    "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
                    "topics": [{"name": TOPIC, "partition_indexes": [partition]}],
                    "coordinator_epoch": coordinator_epoch}]})
                return int(answer["markers"][0]["topics"][0]["partitions"][0]["error_code"])

            # broker 1 does not own partition 1: it refuses and never opens its log
            assert await marker(1, 1, 50) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (TOPIC, 1) not in one.topics.open_partitions()
            assert await marker(2, 1, 50) == 0
            # a deposed coordinator (lower epoch) is fenced by the partition
            assert await marker(2, 1, 49) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        finally:
            await peers.aclose()


async def test_inter_broker_requests_are_refused_by_a_standalone() -> None:
    from protocols.kafka.broker_api import RequestContext
    from protocols.kafka.codec import RequestHeader
    from protocols.kafka.handlers.txn_inter_broker import (
        handle_txn_offset_commit_or_apply,
        handle_write_txn_markers,
    )

    class Standalone:
        authorizer = None

    ctx = RequestContext(broker=Standalone())  # type: ignore[arg-type]
    body: dict[str, Any] = {"markers": [{
        "producer_id": 5, "producer_epoch": 0, "transaction_result": True,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 1}]}
    answer = await handle_write_txn_markers(ctx, RequestHeader(27, 1, 1, "x"), body)
    code = answer["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    assert code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    apply = {"transactional_id": "", "group_id": "g", "producer_id": -1, "producer_epoch": -1,
             "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0,
                                                        "committed_offset": 7}]}]}
    answer = await handle_txn_offset_commit_or_apply(ctx, RequestHeader(28, 3, 1, "x"), apply)
    assert answer["topics"][0]["partitions"][0]["error_code"] \
        == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
