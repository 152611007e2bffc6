"""An in-process RocketMQ stack for tests: memory metadata store, MemoryBookKeeper, topic
service, the RocketMQ broker and name server listening on 127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.listener import serve_rocketmq_broker, serve_rocketmq_name_server
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQBroker
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicServiceLike
from protocols.rocketmq.name_server import NameServer, NameServerConfig
from tests.ledger_client.bookie_cluster import running_bookies


@dataclass
class RocketMQStack:
    store: MetadataStore
    topics: TopicService
    broker: RocketMQBroker
    name_server_addr: str
    broker_addr: str
    nursery: trio.Nursery


async def start_stack(store: MetadataStore, bk: MemoryBookKeeper, nursery: trio.Nursery,
                      **config: object) -> RocketMQStack:
    factory = ManagedLedgerFactory(store, bk)
    topics = TopicService(store, factory, TopicServiceConfig())
    await topics.load()
    offsets = LedgerOffsetStore(factory, ledger_name=ROCKETMQ_OFFSETS_LEDGER)
    broker = RocketMQBroker(topics, offsets, RocketMQBrokerConfig(
        advertised_host="127.0.0.1", advertised_port=0, **config))  # type: ignore[arg-type]
    await broker.load()
    b_addr = await nursery.start(serve_rocketmq_broker, broker, "127.0.0.1", 0)
    name_server = NameServer(cast(TopicServiceLike, topics), lambda: [broker.endpoint()],
                             NameServerConfig(broker.config.auto_create_topics,
                                              broker.config.default_queue_nums))
    ns_addr = await nursery.start(serve_rocketmq_name_server, name_server, "127.0.0.1", 0)
    nursery.start_soon(broker.run)
    return RocketMQStack(store, topics, broker, f"127.0.0.1:{ns_addr.port}",
                         f"127.0.0.1:{b_addr.port}", nursery)


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await open_store("memory:")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def bookkeeper(store: MetadataStore) -> AsyncIterator[MemoryBookKeeper]:
    async with MemoryBookKeeper(store) as bk:
        yield bk


@pytest.fixture
async def stack(store: MetadataStore, bookkeeper: MemoryBookKeeper
                ) -> AsyncIterator[RocketMQStack]:
    async with trio.open_nursery() as nursery:
        s = await start_stack(store, bookkeeper, nursery)
        try:
            yield s
        finally:
            nursery.cancel_scope.cancel()
            await s.topics.close()
            await s.broker.close()


@pytest.fixture
async def fast_stack(store: MetadataStore, bookkeeper: MemoryBookKeeper
                     ) -> AsyncIterator[RocketMQStack]:
    """Delay levels of 1 s (level 2: 2 s), 2 reconsumes before the DLQ, quick check-backs."""
    async with trio.open_nursery() as nursery:
        s = await start_stack(
            store, bookkeeper, nursery,
            delay_levels="1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
            max_reconsume_times=2, transaction_check_timeout_s=1.0,
            transaction_check_interval_s=1.0, transaction_max_checks=3)
        try:
            yield s
        finally:
            nursery.cancel_scope.cancel()
            await s.topics.close()
            await s.broker.close()


@asynccontextmanager
async def durable_stack(store: MetadataStore, bookie_dir: Path, *, fsync: bool,
                        timeout_s: float = 10.0) -> AsyncIterator[RocketMQStack]:
    """start_stack on the durable backend as `ledgerwire standalone` runs it: one bookie's
    storage engine with its journal, reached in-process (BookKeeper(local_bookies=True))."""
    config = BookieStorageConfig(bookie_dir, fsync=fsync)
    async with open_bookie_storage(config) as storage, \
            running_bookies(store, 1, make_storage=lambda: storage), \
            BookKeeper(store, timeout_s=timeout_s, local_bookies=True) as bk, \
            trio.open_nursery() as nursery:  # fmt: skip
        s = await start_stack(store, bk, nursery)  # type: ignore[arg-type]
        try:
            yield s
        finally:
            nursery.cancel_scope.cancel()
            await s.topics.close()
            await s.broker.close()
