"""Handlers ask `ctx.authorize` per item: DescribeCluster, ACL APIs, and the helper one-liners."""

from __future__ import annotations

import pytest

from gateway.kafka.broker import KafkaBroker
from gateway.security.acl_store import AclStore, Authorizer
from ledger_backend.metadata import open_store
from protocols.kafka import acl_model as m
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, GroupAuthorizationFailedError
from protocols.kafka.handlers.acls import handle_create_acls, handle_describe_acls
from protocols.kafka.handlers.admin import handle_describe_cluster
from protocols.kafka.handlers.authorization import (
    group_denied_code,
    require_group,
    topic_denied_code,
)
from protocols.kafka.sasl import SaslSession


class LoggedIn:
    def __init__(self, principal: str) -> None:
        self.principal = principal


def context(broker: KafkaBroker, principal: str) -> RequestContext:
    ctx = RequestContext(broker=broker, client_address="10.1.2.3:5555")
    ctx.session = LoggedIn(principal)
    return ctx


async def test_describe_cluster_and_acl_apis_are_authorised() -> None:
    store = await open_store("memory:")
    try:
        acls = AclStore(store)
        await acls.create([m.AclBinding(m.RES_CLUSTER, m.CLUSTER_NAME, m.PAT_LITERAL,
                                        "User:ops", "*", m.OP_DESCRIBE, m.PERM_ALLOW),
                           m.AclBinding(m.RES_GROUP, "g", m.PAT_PREFIXED, "User:ops", "*",
                                        m.OP_READ, m.PERM_ALLOW)])
        broker = KafkaBroker(None, authorizer=Authorizer(  # type: ignore[arg-type]
            acls, enabled=True, super_users=["User:root"]))
        header = RequestHeader(60, 1, 1, "t")
        ops = context(broker, "User:ops")
        answer = await handle_describe_cluster(
            ops, header, {"include_cluster_authorized_operations": True})
        assert answer["error_code"] == 0 and len(answer["brokers"]) == 1
        assert answer["cluster_authorized_operations"] == 1 << m.OP_DESCRIBE
        nobody = context(broker, "User:nobody")
        answer = await handle_describe_cluster(  # as Kafka: brokers yes, operations no
            nobody, header, {"include_cluster_authorized_operations": True})
        assert answer["error_code"] == 0 and len(answer["brokers"]) == 1
        assert answer["cluster_authorized_operations"] == 0

        assert (await handle_describe_acls(ops, RequestHeader(29, 1, 1, "t"), {
            "resource_type_filter": m.RES_ANY, "pattern_type_filter": m.PAT_ANY,
            "operation": m.OP_ANY, "permission_type": m.PERM_ANY}))["error_code"] == 0
        creation = {"resource_type": m.RES_TOPIC, "resource_name": "t",
                    "resource_pattern_type": m.PAT_LITERAL, "principal": "User:x",
                    "host": "*", "operation": m.OP_READ, "permission_type": m.PERM_ALLOW}
        refused = await handle_create_acls(ops, RequestHeader(30, 1, 1, "t"),
                                           {"creations": [creation]})
        assert refused["results"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        root = context(broker, "User:root")
        bad = dict(creation, operation=m.OP_ANY)
        made = await handle_create_acls(root, RequestHeader(30, 1, 1, "t"),
                                        {"creations": [creation, bad]})
        assert [r["error_code"] for r in made["results"]] == [0, ErrorCode.INVALID_REQUEST]
        assert len(acls.acls) == 3

        assert group_denied_code(ops, m.OP_READ, "g1") == 0
        assert group_denied_code(nobody, m.OP_READ, "g1") == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert topic_denied_code(ops, m.OP_READ, "t") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(GroupAuthorizationFailedError):
            require_group(nobody, m.OP_READ, "g1")
    finally:
        await store.close()


async def test_without_authorizer_everything_is_allowed_and_acl_apis_are_disabled() -> None:
    broker = KafkaBroker(None)  # type: ignore[arg-type]
    ctx = RequestContext(broker=broker)
    assert ctx.principal == "User:ANONYMOUS" and ctx.authorize(m.OP_ALTER, m.RES_CLUSTER, "x")
    answer = await handle_describe_acls(ctx, RequestHeader(29, 1, 1, "t"), {})
    assert answer["error_code"] == ErrorCode.SECURITY_DISABLED
    session = SaslSession()
    ctx.session = session
    assert ctx.principal == "User:ANONYMOUS"  # not authenticated yet
