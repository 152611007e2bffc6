"""A deleted topic takes its RocketMQ consumer offsets (every group's, durably) and its RocketMQ 5
SimpleConsumer delivery state along, as RocketMQ's broker cleans a deleted topic's offsets: a
topic created again under the name is consumed from its start.  Before, both stayed (the
offsets resumed by a new topic of the name, the state ledgers loaded again for good)."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from types import SimpleNamespace

import trio

from gateway.config.settings import RocketMQConfig
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.bundle_broker import RocketMQOffsetLedgers
from gateway.rocketmq.cluster_grpc import ClusterGrpc
from gateway.rocketmq.grpc_receive import pop_ledger_name
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER
from gateway.rocketmq.setup import build_rocketmq
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store

SYSTEM = ManagedLedgerConfig(max_entries_per_ledger=4)


async def test_a_deleted_topic_leaves_no_rocketmq_offsets_or_delivery_state() -> None:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory)
            async with AsyncExitStack() as stack, trio.open_nursery() as background:
                side = await build_rocketmq(RocketMQConfig(), topics, factory, SYSTEM, stack,
                                            background)
                assert side.grpc is not None
                delivery = side.grpc.receiver.delivery
                offsets = side.broker.offsets
                for name in ("orders", "payments"):
                    await topics.create_topic(name, 2)
                    for queue in (0, 1):
                        await offsets.commit("g", name, queue, 3)
                        await delivery.acquire("sc", name, queue, "client", 2, fetchable_end=3,
                                               log_start=0, start_at=0)

                await topics.delete_topic("orders")

                assert offsets.committed("g") == {("payments", 0): 3, ("payments", 1): 3}
                assert {t for t, _ in delivery.loaded_partitions()} == {"payments"}
                assert [n for n in await factory.list_names() if "orders" in n] == []
                await topics.create_topic("orders", 2)
                assert offsets.query("g", "orders", 0) is None
                assert await delivery.view("sc", "orders", 0) is None
                background.cancel_scope.cancel()
            await topics.close()
            again = LedgerOffsetStore(factory, SYSTEM, ledger_name=ROCKETMQ_OFFSETS_LEDGER)
            assert set((await again.load())["g"]) == {("payments", 0), ("payments", 1)}
            await again.close()
    finally:
        await store.close()


async def test_a_cluster_brokers_bundles_lose_a_deleted_topics_offsets() -> None:
    """In a cluster each bundle keeps its own RocketMQ offsets; the broker's deletion hook
    (run by the deleting broker and by every broker seeing the topic go) empties them of the
    topic in every bundle it owns."""
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            ledgers = RocketMQOffsetLedgers(ManagedLedgerFactory(store, bk), SYSTEM)
            for bundle in (0, 1):
                await ledgers.acquired(bundle)
                offsets = ledgers.store(bundle)
                assert offsets is not None
                for topic in ("orders", "payments"):
                    await offsets.commit("g", topic, bundle, 7)
            await ledgers.topic_deleted(TopicInfo("orders", uuid.uuid4(), 2, {}))
            for bundle in (0, 1):
                offsets = ledgers.store(bundle)
                assert offsets is not None and offsets.committed("g") == {("payments", bundle): 7}
            await ledgers.close_all()
    finally:
        await store.close()


async def test_a_cluster_brokers_simple_consumer_state_of_a_deleted_topic_goes() -> None:
    """In a cluster the SimpleConsumer state logs are named after the storage partitions;
    the cluster's gRPC side registers a deletion hook that deletes them (and closes what its
    bundles loaded of them), so a topic created again starts without the old state."""
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory)
            side = SimpleNamespace(brokers=[], topics=topics)  # no bundle served here
            ClusterGrpc(RocketMQConfig(grpc_listener="127.0.0.1:18081"),
                        side, factory, SYSTEM)  # type: ignore[arg-type]
            for name in ("orders", "payments"):
                await topics.create_topic(name, 2)
                for partition in (0, 1):
                    ledger = await factory.open(pop_ledger_name(name, partition), SYSTEM)
                    await ledger.append(b"state")
            await topics.delete_topic("orders")
            names = await factory.list_names()
            assert [n for n in names if "orders" in n] == []
            assert {pop_ledger_name("payments", p) for p in (0, 1)} <= set(names)
            await topics.close()
    finally:
        await store.close()
