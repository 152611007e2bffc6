"""The ACL and namespace auto-create policy over raw remoting frames, in process: a second
broker listener with an ACL in front of the stack's broker; a namespace registry on the topic
service for the auto-create policy."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from gateway.rocketmq.listener import serve_rocketmq_broker
from gateway.topics.namespaces import NamespaceRegistry
from protocols.rocketmq.acl import PlainAclValidator, sign_request
from protocols.rocketmq.codec import RemotingCommand, ext_str
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext

AK, SK = "RocketMQ", "12345678"
ACCOUNTS: list[dict[str, object]] = [
    {"access_key": AK, "secret_key": SK, "default_topic_perm": "PUB|SUB",
     "default_group_perm": "SUB", "topic_perms": ["denied=DENY"]},
    {"access_key": "AdminKey", "secret_key": "AdminSecret", "admin": True},
]


async def call(client: RawClient, code: int, ext: dict[str, object], body: bytes = b"", *,
               ak: str | None = AK, sk: str = SK) -> RemotingCommand:
    fields = {k: ext_str(v) for k, v in ext.items() if v is not None}
    if ak is not None:
        sign_request(fields, body, ak, sk)
    return await client.call(code, dict(fields), body)


@asynccontextmanager
async def acl_connection(stack: RocketMQStack, accounts: list[dict[str, object]]
                         ) -> AsyncIterator[RawClient]:  # fmt: skip
    """A connection to a second listener of the stack's broker, with the plain ACL of
    `accounts` in front of it."""
    acl = PlainAclValidator.from_config(accounts)
    addr = await stack.nursery.start(partial(serve_rocketmq_broker, stack.broker, "127.0.0.1", 0,
                                             acl=acl))
    client = await RawClient.connect(f"127.0.0.1:{addr.port}")
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def acl_client(stack: RocketMQStack) -> AsyncIterator[RawClient]:
    async with acl_connection(stack, ACCOUNTS) as client:
        yield client


async def test_signed_requests_pass_and_tampered_ones_get_no_permission(
        acl_client: RawClient) -> None:
    ok = await call(acl_client, RC.SEND_MESSAGE_V2, send_ext("acl_t", {"TAGS": "a"}), b"hi")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    pulled = await call(acl_client, RC.PULL_MESSAGE, pull_ext("acl_t", 0, 0))
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    wrong = await call(acl_client, RC.SEND_MESSAGE_V2, send_ext("acl_t", {}), b"hi",
                       sk="not-the-secret")
    assert (wrong.code, wrong.remark) == (
        ResponseCode.NO_PERMISSION, "AclException: Check signature failed for accessKey=RocketMQ")
    fields = sign_request({k: ext_str(v) for k, v in send_ext("acl_t", {}).items()}, b"hi",
                          AK, SK)
    sig = fields["Signature"]
    fields["Signature"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    tampered = await acl_client.call(RC.SEND_MESSAGE_V2, dict(fields), b"hi")
    assert tampered.code == ResponseCode.NO_PERMISSION
    unsigned = await call(acl_client, RC.SEND_MESSAGE_V2, send_ext("acl_t", {}), b"hi", ak=None)
    assert (unsigned.code, unsigned.remark) == (
        ResponseCode.NO_PERMISSION, "AclException: No accessKey is configured")
    # the connection stays usable after refusals
    again = await call(acl_client, RC.SEND_MESSAGE_V2, send_ext("acl_t", {}), b"hi")
    assert again.code == ResponseCode.SUCCESS


async def test_denied_topic_and_admin_codes(acl_client: RawClient,
                                            stack: RocketMQStack) -> None:
    denied = await call(acl_client, RC.SEND_MESSAGE_V2, send_ext("denied", {}), b"x")
    assert (denied.code, denied.remark) == (
        ResponseCode.NO_PERMISSION, "AclException: No default permission for topic=denied")
    assert "denied" not in stack.topics.topics()  # refused before any auto-creation
    create = {"topic": "made_by_admin", "readQueueNums": 2, "writeQueueNums": 2}
    refused = await call(acl_client, RC.UPDATE_AND_CREATE_TOPIC, create)
    assert refused.code == ResponseCode.NO_PERMISSION
    made = await call(acl_client, RC.UPDATE_AND_CREATE_TOPIC, create, ak="AdminKey",
                      sk="AdminSecret")
    assert made.code == ResponseCode.SUCCESS, made.remark


async def test_global_white_list_passes_unsigned_requests(stack: RocketMQStack) -> None:
    acl = PlainAclValidator.from_config(ACCOUNTS, ["127.0.0.*"])
    addr = await stack.nursery.start(partial(serve_rocketmq_broker, stack.broker, "127.0.0.1", 0,
                                             acl=acl))
    client = await RawClient.connect(f"127.0.0.1:{addr.port}")
    r = await call(client, RC.SEND_MESSAGE_V2, send_ext("denied", {}), b"x", ak=None)
    assert r.code == ResponseCode.SUCCESS, r.remark
    await client.aclose()


# --- namespace policy: auto-creation ------------------------------------------------------------


async def with_namespaces(stack: RocketMQStack) -> NamespaceRegistry:
    namespaces = NamespaceRegistry(stack.store)
    await namespaces.load()
    stack.topics.namespaces = namespaces
    await namespaces.create_tenant("strict")
    await namespaces.create_namespace("strict/ns", {"auto_create_topics": False})
    return namespaces


async def test_auto_create_off_namespace_refuses_unknown_topics(stack: RocketMQStack) -> None:
    namespaces = await with_namespaces(stack)
    c = await RawClient.connect(stack.broker_addr)
    refused = await c.call(RC.SEND_MESSAGE_V2, send_ext("strict%ns%orders", {}), b"x")
    assert refused.code == ResponseCode.TOPIC_NOT_EXIST == 17, refused.remark
    assert "strict.ns.orders" not in stack.topics.topics()
    allowed = await c.call(RC.SEND_MESSAGE_V2, send_ext("elsewhere", {}), b"x")
    assert allowed.code == ResponseCode.SUCCESS, allowed.remark
    # an existing topic in the strict namespace is served; an explicit creation is allowed
    await stack.topics.create_topic("strict.ns.made", 1)
    ok = await c.call(RC.SEND_MESSAGE_V2, send_ext("strict%ns%made", {}), b"x")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    await stack.broker.ensure_topic("strict.ns.by_admin", 2, explicit=True)
    assert stack.topics.topics()["strict.ns.by_admin"].partitions == 2
    # the default namespace off: TBW102 is not routed, system topics are still made
    await namespaces.set_policies("public/default", {"auto_create_topics": False})
    ns = await RawClient.connect(stack.name_server_addr)
    route = await ns.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    assert route.code == ResponseCode.TOPIC_NOT_EXIST
    heartbeat = json.dumps({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "CG_STRICT", "consumeType": "CONSUME_PASSIVELY",
         "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
         "subscriptionDataSet": [], "unitMode": False}]}).encode()
    beat = await c.call(RC.HEART_BEAT, {}, heartbeat)
    assert beat.code == ResponseCode.SUCCESS, beat.remark
    assert ".RETRY.CG_STRICT" in stack.topics.topics()
    await namespaces.set_policies("public/default", {"auto_create_topics": None})
    route = await ns.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    assert route.code == ResponseCode.SUCCESS
    with trio.move_on_after(1):
        await ns.aclose()
        await c.aclose()


async def test_tenant_accounts_against_the_namespace_registry(stack: RocketMQStack) -> None:
    namespaces = await with_namespaces(stack)
    await namespaces.create_tenant("acme", ["User:AcmeFriend"])
    await namespaces.create_namespace("acme/sales")
    tenant_account = {"access_key": "AcmeKey1", "secret_key": SK, "tenant": "acme",
                      "default_topic_perm": "PUB|SUB", "default_group_perm": "SUB"}
    friend = {**tenant_account, "access_key": "AcmeFriend", "tenant": None}
    acl = PlainAclValidator.from_config([*ACCOUNTS, tenant_account, friend], (), namespaces)
    addr = await stack.nursery.start(partial(serve_rocketmq_broker, stack.broker, "127.0.0.1", 0,
                                             acl=acl))
    c = await RawClient.connect(f"127.0.0.1:{addr.port}")
    own = await call(c, RC.SEND_MESSAGE_V2, send_ext("acme%sales%orders", {}), b"x",
                     ak="AcmeKey1")
    assert own.code == ResponseCode.SUCCESS, own.remark
    other = await call(c, RC.SEND_MESSAGE_V2, send_ext("orders", {}), b"x", ak="AcmeKey1")
    assert (other.code, other.remark) == (
        ResponseCode.NO_PERMISSION,
        "AclException: topic=orders belongs to tenant public, not to accessKey=AcmeKey1")
    # accounts without a tenant: the tenant's allowed principals decide
    outsider = await call(c, RC.PULL_MESSAGE, pull_ext("acme%sales%orders", 0, 0))
    assert outsider.code == ResponseCode.NO_PERMISSION
    allowed = await call(c, RC.PULL_MESSAGE, pull_ext("acme%sales%orders", 0, 0),
                         ak="AcmeFriend")
    assert allowed.code == ResponseCode.SUCCESS, allowed.remark
    await c.aclose()
