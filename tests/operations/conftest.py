"""Fixtures for operations tests: an in-process admin stack (memory store, MemoryBookKeeper,
topic service with a namespace registry, a group coordinator) and its admin HTTP server
(unauthenticated, as a PLAINTEXT broker serves it on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from gateway.admin.api import AdminContext
from gateway.admin.auth import AdminAuth
from gateway.admin.http_server import serve
from gateway.admin.routes import build_admin_app
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.retention_policies import RetentionPolicies
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CoordinatorConfig, GroupCoordinator
from tests.operations.ops_stack import OpsStack


@pytest.fixture
async def ops() -> AsyncIterator[OpsStack]:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory, TopicServiceConfig(max_entries_per_ledger=2))
            await topics.load()
            namespaces = NamespaceRegistry(store)
            await namespaces.load()
            topics.namespaces = namespaces
            offset_store = LedgerOffsetStore(factory)
            coordinator = GroupCoordinator(offset_store, CoordinatorConfig())
            clock = [10_000_000]
            retention = RetentionPolicies(topics, namespaces, coordinator,
                                          now_ms=lambda: clock[0])
            admin = AdminContext(store, topics, namespaces, coordinator, retention=retention,
                                 ready=True)
            async with trio.open_nursery() as background:
                await background.start(coordinator.run)
                try:
                    yield OpsStack(store, topics, namespaces, coordinator, retention, admin,
                                   clock)
                finally:
                    background.cancel_scope.cancel()
                    await topics.close()
                    await offset_store.close()
    finally:
        await store.close()


@pytest.fixture
async def admin_port(ops: OpsStack) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        app = build_admin_app(ops.admin, AdminAuth(required=False))  # as on a PLAINTEXT broker
        port = await nursery.start(serve, app, "127.0.0.1", 0)
        yield port
        nursery.cancel_scope.cancel()
