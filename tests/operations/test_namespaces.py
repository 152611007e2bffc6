"""Tenants, namespaces, policies and the topic -> managed ledger mapping (in-process)."""

from __future__ import annotations

import pytest
import trio

from gateway.topics.namespaces import NamespaceError, NamespacePolicies, NamespaceRegistry
from protocols.kafka.errors import PolicyViolationError
from tests.operations.ops_stack import OpsStack


async def test_default_namespace_keeps_todays_ledger_names(ops: OpsStack) -> None:
    await ops.topics.create_topic("orders", 2)
    assert ops.topics.managed_ledger_name("orders", 1) == "public/default/orders-1"
    assert ops.namespaces.tenants() == {"public": {"admin_roles": [], "allowed_principals": []}}
    assert ops.namespaces.namespaces() == ["public/default"]


async def test_prefixed_and_mapped_topics_reach_other_namespaces(ops: OpsStack) -> None:
    ns = ops.namespaces
    await ns.create_tenant("acme")
    await ns.create_namespace("acme/sales", {"max_topics": 5})
    assert ops.topics.managed_ledger_name("acme.sales.orders", 0) == \
        "acme/sales/acme.sales.orders-0"
    # a prefix that names no namespace stays in the default one
    assert ns.namespace_of("acme.hr.orders") == "public/default"
    await ns.map_topic("legacy-orders", "acme/sales")
    assert ops.topics.managed_ledger_name("legacy-orders", 3) == "acme/sales/legacy-orders-3"
    with pytest.raises(NamespaceError):
        await ns.map_topic("legacy-orders", "acme/sales")
    # a second registry over the same store sees everything after load()
    again = NamespaceRegistry(ops.store)
    await again.load()
    assert again.namespace_of("legacy-orders") == "acme/sales"
    assert again.policies("acme/sales").max_topics == 5


async def test_policies_validate_merge_and_reset(ops: OpsStack) -> None:
    ns = ops.namespaces
    await ns.create_tenant("t")
    await ns.create_namespace("t/n")
    with pytest.raises(NamespaceError):
        await ns.set_policies("t/n", {"ensemble_size": 1, "write_quorum": 2})
    with pytest.raises(NamespaceError):
        await ns.set_policies("t/n", {"no_such_policy": 1})
    with pytest.raises(NamespaceError):
        await ns.set_policies("t/n", {"auto_create_topics": "yes"})
    await ns.set_policies("t/n", {"message_ttl_seconds": 60, "auto_create_topics": False})
    merged = await ns.set_policies("t/n", {"retention_time_minutes": 10})
    assert merged == NamespacePolicies(message_ttl_seconds=60, auto_create_topics=False,
                                       retention_time_minutes=10)
    reset = await ns.set_policies("t/n", {"message_ttl_seconds": None})
    assert reset.message_ttl_seconds is None
    with pytest.raises(NamespaceError) as refused:
        await ns.create_namespace("nobody/n")
    assert refused.value.status == 404


async def test_namespace_quorums_and_retention_reach_the_managed_ledger(ops: OpsStack) -> None:
    ns = ops.namespaces
    await ns.create_tenant("t")
    await ns.create_namespace("t/n", {"ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2,
                                      "retention_time_minutes": 5, "retention_size_mb": 1})
    await ops.topics.create_topic("t.n.x", 1)
    ml_config, _ = ops.topics._partition_configs(ops.topics.topics()["t.n.x"])
    assert (ml_config.ensemble_size, ml_config.write_quorum, ml_config.ack_quorum) == (3, 2, 2)
    assert ml_config.retention_time_s == 300 and ml_config.retention_bytes == 1 << 20
    # a topic's own retention.ms wins over its namespace
    await ops.topics.create_topic("t.n.y", 1, {"retention.ms": "1000"})
    ml_config, _ = ops.topics._partition_configs(ops.topics.topics()["t.n.y"])
    assert ml_config.retention_time_s == 1.0


async def test_max_topics_and_auto_create_policies(ops: OpsStack) -> None:
    ns = ops.namespaces
    await ns.create_tenant("t")
    await ns.create_namespace("t/n", {"max_topics": 1, "auto_create_topics": False})
    await ops.topics.create_topic("t.n.one", 1)
    with pytest.raises(PolicyViolationError):
        await ops.topics.create_topic("t.n.two", 1)
    await ops.topics.create_topic("elsewhere", 1)  # the default namespace has no limit
    assert not ops.topics.auto_create_allowed("t.n.three")
    assert ops.topics.auto_create_allowed("anything")


async def test_topics_created_at_once_count_against_max_topics(ops: OpsStack) -> None:
    """A CreateTopics request writes its topics concurrently: those still being written
    count, so five at once in a namespace of max_topics=2 make two."""
    await ops.namespaces.create_tenant("t")
    await ops.namespaces.create_namespace("t/n", {"max_topics": 2})
    refused: list[str] = []

    async def create(name: str) -> None:
        try:
            await ops.topics.create_topic(name, 1)
        except PolicyViolationError:
            refused.append(name)

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(create, f"t.n.at-once-{i}")
    assert len(refused) == 3
    assert len([n for n in ops.topics.topics() if n.startswith("t.n.")]) == 2


async def test_namespace_and_tenant_deletion_rules(ops: OpsStack) -> None:
    ns = ops.namespaces
    await ns.create_tenant("t")
    await ns.create_namespace("t/n")
    with pytest.raises(NamespaceError):
        await ns.delete_tenant("t")
    with pytest.raises(NamespaceError):
        await ns.delete_namespace("t/n", ["t.n.still-here"])
    with pytest.raises(NamespaceError):
        await ns.delete_namespace("public/default", [])
    await ns.delete_namespace("t/n", [])
    await ns.delete_tenant("t")
    assert "t" not in ns.tenants()


async def test_tenant_allowed_principals(ops: OpsStack) -> None:
    await ops.namespaces.create_tenant("secret", ["User:alice"])
    await ops.namespaces.create_namespace("secret/ns")
    assert ops.namespaces.principal_allowed("secret.ns.t", "User:alice")
    assert not ops.namespaces.principal_allowed("secret.ns.t", "User:bob")
    assert ops.namespaces.principal_allowed("public-topic", "User:bob")


class _AllowAll:
    enabled = True
    super_users = frozenset({"User:root"})

    def authorize(self, *args: object) -> bool:
        return True


async def test_tenant_authorizer_refuses_principals_outside_the_tenant(ops: OpsStack) -> None:
    from gateway.security.tenant_authorizer import TenantAuthorizer
    from protocols.kafka.acl_model import RES_GROUP, RES_TOPIC

    await ops.namespaces.create_tenant("secret", ["User:alice"])
    await ops.namespaces.create_namespace("secret/ns")
    auth = TenantAuthorizer(_AllowAll(), ops.namespaces)
    assert auth.authorize("User:alice", "h", 3, RES_TOPIC, "secret.ns.t")
    assert not auth.authorize("User:bob", "h", 3, RES_TOPIC, "secret.ns.t")
    assert auth.authorize("User:root", "h", 3, RES_TOPIC, "secret.ns.t")
    assert auth.authorize("User:bob", "h", 3, RES_TOPIC, "open-topic")
    assert auth.authorize("User:bob", "h", 3, RES_GROUP, "secret.ns.t")
    assert auth.super_users == frozenset({"User:root"})  # delegated
