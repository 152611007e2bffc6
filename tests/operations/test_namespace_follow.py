"""NamespaceRegistry.follow: namespaces and policies changed by another process are seen without
a restart (two registries on one shared store in-process; the admin CLI against a standalone)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
import trio
from confluent_kafka import KafkaError, Producer

from gateway.topics.namespaces import NAMESPACES_PATH, NamespaceRegistry
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from tests.support.standalone import Standalone


@pytest.fixture
async def two_stores() -> AsyncIterator[tuple[MetadataStore, MetadataStore]]:
    """Two sessions of one shared tree, as two processes on one ZooKeeper."""
    first = await open_store("memory:namespace-follow")
    second = await open_store("memory:namespace-follow")
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()


async def eventually(check: Callable[[], bool], timeout_s: float = 2.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if check():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"not true within {timeout_s} s")


async def test_follower_sees_namespaces_and_policies_of_another_process(
        two_stores: tuple[MetadataStore, MetadataStore]) -> None:
    admin_side = NamespaceRegistry(two_stores[0])
    broker_side = NamespaceRegistry(two_stores[1])
    await admin_side.load()
    await broker_side.load()
    changes: list[int] = []

    async def on_change() -> None:
        changes.append(1)

    async with trio.open_nursery() as nursery:
        # a long refresh interval: the watch on the change marker must do it
        nursery.start_soon(lambda: broker_side.follow(on_change, refresh_interval_s=3600))
        await trio.sleep(0.05)
        await admin_side.create_tenant("acme")
        await admin_side.create_namespace("acme/sales", {"auto_create_topics": False})
        await eventually(lambda: "acme/sales" in broker_side.namespaces())
        assert broker_side.namespace_of("acme.sales.orders") == "acme/sales"
        assert not broker_side.auto_create_allowed("acme.sales.orders", True)
        await admin_side.set_policies("acme/sales", {"auto_create_topics": True,
                                                     "backlog_quota_mb": 5})
        await eventually(lambda: broker_side.policies("acme/sales").backlog_quota_mb == 5)
        assert broker_side.auto_create_allowed("acme.sales.orders", False)
        await admin_side.map_topic("legacy", "acme/sales")
        await eventually(lambda: broker_side.namespace_of("legacy") == "acme/sales")
        await admin_side.delete_namespace("acme/sales", [])
        await eventually(lambda: "acme/sales" not in broker_side.namespaces())
        assert changes  # the caller's hook ran (the standalone reapplies topic configs)
        nursery.cancel_scope.cancel()


async def test_periodic_refresh_catches_writes_that_touch_no_marker(
        two_stores: tuple[MetadataStore, MetadataStore]) -> None:
    broker_side = NamespaceRegistry(two_stores[1])
    await broker_side.load()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: broker_side.follow(refresh_interval_s=0.1))
        await trio.sleep(0.05)
        # a writer that does not know the marker (an older version, a hand edit)
        await two_stores[0].set(f"{NAMESPACES_PATH}/public/default",
                                b'{"format": 1, "policies": {"max_topics": 7}}', -1)
        await eventually(lambda: broker_side.policies("public/default").max_topics == 7)
        nursery.cancel_scope.cancel()


async def test_topic_service_refuses_auto_create_once_the_follower_saw_the_policy(
        two_stores: tuple[MetadataStore, MetadataStore]) -> None:
    admin_side = NamespaceRegistry(two_stores[0])
    await admin_side.load()
    async with MemoryBookKeeper(two_stores[1]) as bk:
        topics = TopicService(two_stores[1], ManagedLedgerFactory(two_stores[1], bk))
        await topics.load()
        topics.namespaces = NamespaceRegistry(two_stores[1])
        await topics.namespaces.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(topics.namespaces.follow, topics.reapply_configs)
            assert topics.auto_create_allowed("ops.locked.events")
            await admin_side.create_tenant("ops")
            await admin_side.create_namespace("ops/locked", {"auto_create_topics": False})
            await eventually(lambda: not topics.auto_create_allowed("ops.locked.events"))
            nursery.cancel_scope.cancel()
        await topics.close()


# --- a real standalone and the admin CLI ---------------------------------------------------


@pytest.fixture(scope="module")
def server(module_standalone: Standalone) -> Standalone:
    return module_standalone


def produce_one(server: Standalone, topic: str, timeout_ms: int = 60_000) -> KafkaError | None:
    """One message's delivery error (None: delivered). A send that must succeed gets a minute:
    auto-creating a topic opens its partition (a ledger, fsynced), slow on a loaded machine."""
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": timeout_ms,
                  "topic.metadata.propagation.max.ms": 1000})
    p.produce(topic, value=b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(timeout_ms / 1000 + 30)
    return errors[0] if errors else None


@pytest.mark.integration
def test_namespace_created_by_the_admin_cli_refuses_a_new_topic_without_restart(
        server: Standalone) -> None:
    assert produce_one(server, "open.events") is None  # auto-create on by default
    server.admin("tenants", "create", "locked")
    server.admin("namespaces", "create", "locked/ns", "--policy",
              "auto_create_topics=false")
    started = time.monotonic()
    refused = produce_one(server, "locked.ns.events", timeout_ms=3000)
    assert refused is not None and refused.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT), refused
    assert time.monotonic() - started < 10
    pid = server.proc.pid if server.proc is not None else None
    server.admin("policies", "set", "locked/ns", "auto_create_topics=true")
    assert produce_one(server, "locked.ns.events") is None  # the same process, no restart
    assert server.proc is not None and server.proc.pid == pid
