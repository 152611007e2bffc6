"""The client-facing APIs ask the authorizer as Kafka does: Fetch (READ on the topic),
FindCoordinator (DESCRIBE on the group or transactional id), InitProducerId (WRITE on the
transactional id; IDEMPOTENT_WRITE on the cluster or WRITE on some topic without one) and the
transaction APIs (WRITE on the transactional id, WRITE on added topics, READ on the group and
on committed topics)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.kafka.broker import KafkaBroker
from gateway.security.acl_store import AclStore, Authorizer
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka import acl_model as m
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.fetch import handle_fetch
from protocols.kafka.handlers.find_coordinator import handle_find_coordinator
from protocols.kafka.handlers.producer_ids import handle_init_producer_id
from protocols.kafka.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_txn_offset_commit,
)


class LoggedIn:
    def __init__(self, principal: str) -> None:
        self.principal = principal


def allow(resource_type: int, name: str, principal: str, operation: int,
          pattern: int = m.PAT_LITERAL) -> m.AclBinding:
    return m.AclBinding(resource_type, name, pattern, principal, "*", operation, m.PERM_ALLOW)


def deny(resource_type: int, name: str, principal: str, operation: int,
         pattern: int = m.PAT_LITERAL) -> m.AclBinding:
    return m.AclBinding(resource_type, name, pattern, principal, "*", operation, m.PERM_DENY)


@pytest.fixture
async def secured() -> AsyncIterator[tuple[KafkaBroker, AclStore]]:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            topics = TopicService(store, ManagedLedgerFactory(store, bk),
                                  TopicServiceConfig(default_partitions=1))
            await topics.load()
            await topics.create_topic("orders", 1)
            await topics.create_topic("secret", 1)
            acls = AclStore(store)
            broker = KafkaBroker(topics, authorizer=Authorizer(acls, enabled=True))
            yield broker, acls
            await topics.close()
    finally:
        await store.close()


def as_user(broker: KafkaBroker, principal: str) -> RequestContext:
    ctx = RequestContext(broker=broker, client_address="10.0.0.9:4000")
    ctx.session = LoggedIn(principal)
    return ctx


async def test_fetch_needs_read_on_each_topic(
        secured: tuple[KafkaBroker, AclStore]) -> None:
    broker, acls = secured
    await acls.create([allow(m.RES_TOPIC, "orders", "User:app", m.OP_READ)])
    body = {"max_wait_ms": 0, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "fetch_offset": 0,
                                        "partition_max_bytes": 1 << 20}]}
        for name in ("orders", "secret")]}
    answer = await handle_fetch(as_user(broker, "User:app"), RequestHeader(1, 11, 1, "c"), body)
    codes = {t["topic"]: t["partitions"][0]["error_code"] for t in answer["responses"]}
    assert codes == {"orders": 0, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def test_find_coordinator_needs_describe(secured: tuple[KafkaBroker, AclStore]) -> None:
    broker, acls = secured
    await acls.create([allow(m.RES_GROUP, "g-", "User:app", m.OP_READ, m.PAT_PREFIXED),
                       allow(m.RES_TRANSACTIONAL_ID, "tx", "User:app", m.OP_WRITE)])
    ctx = as_user(broker, "User:app")
    groups = await handle_find_coordinator(ctx, RequestHeader(10, 4, 1, "c"), {
        "key_type": 0, "coordinator_keys": ["g-1", "other"]})
    assert [c["error_code"] for c in groups["coordinators"]] == [
        0, ErrorCode.GROUP_AUTHORIZATION_FAILED]
    txn = await handle_find_coordinator(ctx, RequestHeader(10, 3, 1, "c"),
                                        {"key_type": 1, "key": "tx"})
    assert txn["error_code"] == 0
    txn = await handle_find_coordinator(ctx, RequestHeader(10, 3, 1, "c"),
                                        {"key_type": 1, "key": "not-mine"})
    assert txn["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


async def test_init_producer_id_rules(secured: tuple[KafkaBroker, AclStore]) -> None:
    broker, acls = secured
    header = RequestHeader(22, 4, 1, "c")
    idempotent = {"transactional_id": None, "transaction_timeout_ms": 1000}
    refused = await handle_init_producer_id(as_user(broker, "User:none"), header, idempotent)
    assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # KIP-679: WRITE on some topic is enough for an idempotent producer id ...
    await acls.create([allow(m.RES_TOPIC, "orders", "User:writer", m.OP_WRITE)])
    granted = await handle_init_producer_id(as_user(broker, "User:writer"), header, idempotent)
    assert granted["error_code"] == 0 and granted["producer_id"] >= 0
    # ... unless a DENY covers every topic it may write to.
    await acls.create([deny(m.RES_TOPIC, "ord", "User:writer", m.OP_WRITE, m.PAT_PREFIXED)])
    again = await handle_init_producer_id(as_user(broker, "User:writer"), header, idempotent)
    assert again["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await acls.create([allow(m.RES_CLUSTER, m.CLUSTER_NAME, "User:idem", m.OP_IDEMPOTENT_WRITE)])
    assert (await handle_init_producer_id(as_user(broker, "User:idem"), header,
                                          idempotent))["error_code"] == 0
    # A transactional id needs WRITE on it (checked before any coordinator is asked).
    txn = await handle_init_producer_id(as_user(broker, "User:idem"), header, {
        "transactional_id": "tx", "transaction_timeout_ms": 1000})
    assert txn["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


async def test_transaction_apis_check_id_topics_and_group(
        secured: tuple[KafkaBroker, AclStore]) -> None:
    broker, acls = secured
    await acls.create([allow(m.RES_TRANSACTIONAL_ID, "tx", "User:app", m.OP_WRITE),
                       allow(m.RES_TOPIC, "orders", "User:app", m.OP_ALL)])
    app, stranger = as_user(broker, "User:app"), as_user(broker, "User:x")
    add_v3 = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
              "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
                  {"name": "orders", "partitions": [0]}, {"name": "secret", "partitions": [0]}]}
    added = await handle_add_partitions_to_txn(app, RequestHeader(24, 3, 1, "c"), add_v3)
    codes = {t["name"]: t["results_by_partition"][0]["partition_error_code"]
             for t in added["results_by_topic_v3_and_below"]}
    assert codes == {"orders": ErrorCode.OPERATION_NOT_ATTEMPTED,
                     "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    added = await handle_add_partitions_to_txn(stranger, RequestHeader(24, 3, 1, "c"), add_v3)
    assert {p["partition_error_code"] for t in added["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]} == {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

    offsets = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
    answer = await handle_add_offsets_to_txn(app, RequestHeader(25, 3, 1, "c"), offsets)
    assert answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    answer = await handle_end_txn(stranger, RequestHeader(26, 3, 1, "c"), {
        "transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True})
    assert answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    commit = {**offsets, "topics": [
        {"name": "secret", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}
    answer = await handle_txn_offset_commit(app, RequestHeader(28, 3, 1, "c"), commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED)
    await acls.create([allow(m.RES_GROUP, "g", "User:app", m.OP_READ)])
    answer = await handle_txn_offset_commit(app, RequestHeader(28, 3, 1, "c"), commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def test_write_on_some_topic_with_allow_everyone_and_unrelated_acls() -> None:
    """Kafka's authorizeByResourceType with allow.everyone.if.no.acl.found: allowed unless a
    DENY covers every resource (a Java 3.x producer is idempotent by default)."""
    acls = [allow(m.RES_CLUSTER, m.CLUSTER_NAME, "User:admin", m.OP_ALTER),
            allow(m.RES_TOPIC, "secret", "User:alice", m.OP_READ)]
    assert m.decide_by_type(acls, "User:bob", "h", m.OP_WRITE, m.RES_TOPIC,
                            allow_if_no_acl=True)
    assert not m.decide_by_type(acls, "User:bob", "h", m.OP_WRITE, m.RES_TOPIC,
                                allow_if_no_acl=False)
    denied_all = acls + [deny(m.RES_TOPIC, m.WILDCARD_NAME, "User:bob", m.OP_WRITE)]
    assert not m.decide_by_type(denied_all, "User:bob", "h", m.OP_WRITE, m.RES_TOPIC,
                                allow_if_no_acl=True)
