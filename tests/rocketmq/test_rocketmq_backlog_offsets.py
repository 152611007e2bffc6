"""Backlog quotas (gateway/topics/backlog_quota.py) count RocketMQ consumer groups' committed
offsets,
not only Kafka coordinator groups': a lagging RocketMQ group puts a partition over quota, its
catching up releases it, and consumer_backlog_eviction moves its offset forward.  Standalone
broker (RocketMQOffsets, topics named through RocketMQ's '%' for '.'); the cluster's per-bundle
source is tested in test_rocketmq_bundle_admin.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQBroker
from gateway.topics.backlog_quota import BacklogQuotas
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka import record_batch as rb
from protocols.kafka.group_coordinator import CoordinatorConfig, GroupCoordinator
from protocols.rocketmq.broker_api import RocketMQBrokerConfig

BIG = 100_000  # bytes per batch: 11 batches cross a 1 MB quota


@dataclass
class QuotaStack:
    topics: TopicService
    namespaces: NamespaceRegistry
    quotas: BacklogQuotas
    broker: RocketMQBroker


@pytest.fixture
async def qs(store: MetadataStore, bookkeeper: MemoryBookKeeper) -> AsyncIterator[QuotaStack]:
    factory = ManagedLedgerFactory(store, bookkeeper)
    topics = TopicService(store, factory, TopicServiceConfig(max_entries_per_ledger=2))
    await topics.load()
    namespaces = NamespaceRegistry(store)
    await namespaces.load()
    topics.namespaces = namespaces
    kafka_offsets = LedgerOffsetStore(factory)
    coordinator = GroupCoordinator(kafka_offsets, CoordinatorConfig())
    quotas = BacklogQuotas(topics, namespaces, coordinator, hold_timeout_s=0.1)
    topics.backlog_quotas = quotas  # as gateway/process/standalone.py does, before RocketMQ starts
    broker = RocketMQBroker(topics, LedgerOffsetStore(factory, ledger_name=ROCKETMQ_OFFSETS_LEDGER),
                            RocketMQBrokerConfig(advertised_port=0))
    await broker.load()  # registers its offsets with the backlog quotas
    try:
        yield QuotaStack(topics, namespaces, quotas, broker)
    finally:
        await topics.close()
        await broker.close()
        await kafka_offsets.close()


async def quota_topic(qs: QuotaStack, name: str, policy: str) -> tuple[str, int]:
    """A namespaced topic with a 1 MB quota, filled with 12 batches: (storage name, end)."""
    if "t" not in qs.namespaces.tenants():
        await qs.namespaces.create_tenant("t")
    await qs.namespaces.create_namespace(f"t/{name}", {"backlog_quota_mb": 1,
                                                        "backlog_quota_policy": policy})
    topic = f"t.{name}.events"
    await qs.topics.create_topic(topic, 1)
    plog = await qs.topics.partition(topic, 0)
    for i in range(12):
        await plog.append(rb.build_batch([(None, b"%d" % i + b"x" * BIG)]))
    return topic, plog.high_watermark


async def test_a_lagging_rocketmq_group_puts_the_partition_over_quota(qs: QuotaStack) -> None:
    topic, end = await quota_topic(qs, "strict", "producer_exception")
    assert (await qs.quotas.apply_once()).over_quota == []  # nobody committed: no backlog
    await qs.broker.offsets.commit("rmq_slow", "t%strict%events", 0, 0)
    done = await qs.quotas.apply_once()
    assert [(o["topic"], o["slowest_offset"]) for o in done.over_quota] == [(topic, 0)]
    refusal = await qs.quotas.admit(topic, 0)
    assert refusal is not None and "backlog quota" in refusal.message
    await qs.broker.offsets.commit("rmq_slow", "t%strict%events", 0, end - 1)
    await qs.quotas.apply_once()
    assert await qs.quotas.admit(topic, 0) is None


async def test_eviction_moves_a_rocketmq_group_forward(qs: QuotaStack) -> None:
    topic, end = await quota_topic(qs, "evict", "consumer_backlog_eviction")
    await qs.broker.offsets.commit("rmq_lag", "t%evict%events", 0, 0)
    await qs.broker.offsets.commit("rmq_fast", "t%evict%events", 0, end - 1)
    done = await qs.quotas.apply_once()
    assert [(e["group"], e["from"], e.get("protocol")) for e in done.evicted] == [
        ("rmq_lag", 0, "rocketmq")]
    moved = qs.broker.offsets.query("rmq_lag", "t%evict%events", 0)
    assert moved is not None and 0 < moved < end and moved == done.evicted[0]["to"]
    assert qs.broker.offsets.query("rmq_fast", "t%evict%events", 0) == end - 1
    assert (await qs.quotas.apply_once()).evicted == []  # within quota now


class HeldLog:
    """A RocketMQ offsets log whose next write can be held, to order writes in a test."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict]] = []
        self.hold: trio.Event | None = None

    async def load(self) -> dict:
        return {}

    async def commit(self, group: str, offsets: dict) -> None:
        hold, self.hold = self.hold, None
        if hold is not None:
            await hold.wait()
        self.records.append((group, dict(offsets)))


async def test_advance_never_moves_a_consumer_commit_back() -> None:
    from gateway.rocketmq.service import RocketMQOffsets

    log = HeldLog()
    offsets = RocketMQOffsets(log)  # type: ignore[arg-type]
    await offsets.commit("g", "T", 0, 2)
    release = log.hold = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(offsets.advance, "g", "T", 0, 3)  # held in the log
        await trio.testing.wait_all_tasks_blocked()
        await offsets.commit("g", "T", 0, 7)  # the consumer commits past it meanwhile
        release.set()
    assert offsets.query("g", "T", 0) == 7
    assert log.records[-1][1][("T", 0)].offset == 7  # a replay ends at 7
    await offsets.advance("g", "T", 0, 5)  # behind the commit: nothing written
    assert log.records[-1][1][("T", 0)].offset == 7 and offsets.query("g", "T", 0) == 7
