"""Fixtures for the Kafka server tests: a real in-process stack on a loopback port.

memory metadata store + MemoryBookKeeper + ManagedLedgerFactory + TopicService + KafkaBroker
(with a GroupCoordinator on a ledger-backed offset store and a TransactionCoordinator on a
ledger-backed transaction store),
served by `serve_kafka` on 127.0.0.1 port 0.  Real parts all the way down to the ledger client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.coordinator.transaction_store import LedgerTransactionStore
from gateway.delivery.delivery_service import DeliveryService
from gateway.delivery.group_configs import ShareGroupConfigs
from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.listener import serve_kafka
from gateway.kafka.share_dead_letters import LocalDeadLetters
from gateway.kafka.share_groups import SHARE_STATE_LEDGER_PREFIX, ShareGroups
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CoordinatorConfig, GroupCoordinator
from protocols.kafka.transaction_coordinator import TransactionCoordinator
from tests.kafka_server.kafka_wire_client import WireClient


@dataclass
class KafkaStack:
    broker: KafkaBroker
    topics: TopicService
    port: int
    server_scope: trio.CancelScope

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def client(self) -> WireClient:
        return await WireClient.connect(self.port)


@asynccontextmanager
async def running_stack(**broker_options: Any) -> AsyncIterator[KafkaStack]:
    auto_create = broker_options.get("auto_create_topics", True)
    partitions = broker_options.get("default_partitions", 1)
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(
                store, factory,
                TopicServiceConfig(default_partitions=partitions, auto_create_topics=auto_create),
            )
            await topics.load()
            config = KafkaBrokerConfig(
                broker_id=1, advertised_host="127.0.0.1", advertised_port=0,
                cluster_id="test-cluster", **broker_options,
            )
            coordinator = GroupCoordinator(
                LedgerOffsetStore(factory), CoordinatorConfig(initial_rebalance_delay_s=0.1)
            )
            transactions = TransactionCoordinator(
                LedgerTransactionStore(factory), topics, coordinator
            )
            share_groups = ShareGroups(
                lambda settings_for: DeliveryService(factory, settings_for=settings_for,
                                                     ledger_prefix=SHARE_STATE_LEDGER_PREFIX),
                ShareGroupConfigs(store), dead_letters=LocalDeadLetters(topics),
            )
            broker = KafkaBroker(topics, config, group_coordinator=coordinator,
                                 transaction_coordinator=transactions, share_groups=share_groups)
            try:
                server_scope = trio.CancelScope()

                async def run_server(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                    with server_scope:
                        await serve_kafka(broker, "127.0.0.1", 0, task_status=task_status)

                async with trio.open_nursery() as nursery:
                    await nursery.start(coordinator.run)
                    await nursery.start(transactions.run)
                    await nursery.start(share_groups.run)
                    address = await nursery.start(run_server)
                    yield KafkaStack(broker, topics, address.port, server_scope)
                    server_scope.cancel()
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await share_groups.close()
                    await topics.close()
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


@pytest.fixture
async def stack() -> AsyncIterator[KafkaStack]:
    async with running_stack() as running:
        yield running
