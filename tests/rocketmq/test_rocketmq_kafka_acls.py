"""RocketMQ on a secured standalone is decided by the Kafka ACLs (one principal, one authorizer).

A real `ledgerwire standalone` with Kafka SASL and ACLs on and two RocketMQ accounts.  The
Kafka admin grants `User:RmqWriter1` WRITE and READ on a topic and READ on a group, and a
Kafka DENY on another topic.  With the RocketMQ C++ client: the signed account sends and
consumes; a wrong secret, an unsigned client and a send the Kafka DENY covers are refused.
With raw frames: unsigned and unprivileged admin codes (create, delete, list every topic
config) are refused; the name server hides topics the principal may not describe.  A second
standalone with rocketmq.acl.allow_anonymous warns at start-up and lets User:ANONYMOUS do what
the Kafka ACLs grant it, and nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from rocketmq.client import Producer, SendStatus

from protocols.rocketmq.acl import sign_request
from protocols.rocketmq.codec import ext_str
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.cpp_client import Consumer, message, refused_patiently, send_sync_patiently
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.support.secured_standalone import PASSWORDS, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AK, SK = "RmqWriter1", "RmqSecret1"
NOBODY_AK, NOBODY_SK = "RmqNobody1", "RmqNobody1Secret"
PROTECTED, DENIED, GROUP = "rmq_protected", "rmq_denied", "CG_RMQ_KAFKA"
ACCOUNTS = f"""
[[rocketmq.acl.accounts]]
access_key = "{AK}"
secret_key = "{SK}"

[[rocketmq.acl.accounts]]
access_key = "{NOBODY_AK}"
secret_key = "{NOBODY_SK}"
"""
NO_PERMISSION = int(ResponseCode.NO_PERMISSION)


def kafka_admin(server: Standalone) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap,
                        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                        "sasl.username": "admin", "sasl.password": PASSWORDS["admin"]})


def acl(resource: ResourceType, name: str, principal: str, op: AclOperation,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", op,
                      permission)


def grant(server: Standalone, topics: list[str], bindings: list[AclBinding]) -> None:
    admin = kafka_admin(server)
    for future in admin.create_topics([NewTopic(t, 4, 1) for t in topics]).values():
        future.result(20)
    for future in admin.create_acls(bindings).values():
        future.result(20)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("rmq-kafka-acls"), ACCOUNTS)
    standalone.start()
    try:
        principal = f"User:{AK}"
        grant(standalone, [PROTECTED, DENIED], [
            acl(ResourceType.TOPIC, PROTECTED, principal, AclOperation.WRITE),
            acl(ResourceType.TOPIC, PROTECTED, principal, AclOperation.READ),
            acl(ResourceType.GROUP, GROUP, principal, AclOperation.READ),
            acl(ResourceType.TOPIC, DENIED, "User:*", AclOperation.WRITE),
            acl(ResourceType.TOPIC, DENIED, principal, AclOperation.ALL,
                AclPermissionType.DENY),
        ])
        yield standalone
    finally:
        standalone.stop()


def name_server(server: Standalone) -> str:
    return f"127.0.0.1:{server.name_server_port}"


def broker(server: Standalone) -> str:
    return f"127.0.0.1:{server.rocketmq_broker_port}"


def cpp_producer(server: Standalone, group: str, credentials: tuple[str, str] | None
                 ) -> Producer:
    p = Producer(group, timeout=5_000)
    p.set_namesrv_addr(name_server(server))
    if credentials is not None:
        p.set_session_credentials(credentials[0], credentials[1], "ALIYUN")
    p.start()
    return p


def refused_send(server: Standalone, topic: str, credentials: tuple[str, str] | None,
                 group: str, refusal: str) -> None:
    p = cpp_producer(server, group, credentials)
    try:  # the C++ client reports every failed send as "No route info"; the log says why
        refused_patiently(lambda: p.send_sync(message(topic, b"must not arrive")), topic,
                          lambda: refusal in server.log())
    finally:
        p.shutdown()


def test_signed_account_sends_and_consumes_what_kafka_grants(server: Standalone) -> None:
    p = cpp_producer(server, "PG_RMQ_KAFKA", (AK, SK))
    try:
        statuses = [send_sync_patiently(p, message(PROTECTED, f"m{i}".encode(), "TagA"))
                    for i in range(4)]
    finally:
        p.shutdown()
    assert statuses == [SendStatus.OK] * 4

    consumer = Consumer(name_server(server), GROUP, PROTECTED, credentials=(AK, SK))
    try:
        assert consumer.wait_for(lambda got: len(got) >= 4, 40)
    finally:
        consumer.shutdown()
    received = [r.body for r in consumer.received]
    assert sorted(set(received)) == [f"m{i}".encode() for i in range(4)]  # sends: at least once


ANONYMOUS_CPP_SEND = """
import sys
from rocketmq.client import Message, Producer
p = Producer("PG_ANONYMOUS", timeout=5000)
p.set_namesrv_addr(sys.argv[1])
p.start()
m = Message(sys.argv[2])
m.set_body(b"must not arrive")
try:
    print("sent", p.send_sync(m).status)
except Exception as exc:
    print("refused", type(exc).__name__)
finally:
    p.shutdown()
"""


def test_wrong_secret_unsigned_and_kafka_denied_sends_are_refused(server: Standalone) -> None:
    # A process of its own: the C++ client keeps one client instance (and its credentials)
    # per process, so an unsigned producer must not share one with the signed ones.
    # Each is sent again until the broker has refused one: the C++ client under load can give
    # up before asking it, reporting that as it reports a refusal (see refused_patiently).
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", ANONYMOUS_CPP_SEND, name_server(server),
                               PROTECTED], capture_output=True, text=True, timeout=60)
        assert done.stdout.startswith("refused"), (done.stdout, done.stderr)
        if "No accessKey is configured" in server.log_path.read_text(errors="replace"):
            break
    refused_send(server, PROTECTED, (AK, "not-the-secret"), "PG_BAD_SECRET",
                 "Check signature failed for accessKey=RmqWriter1")
    refused_send(server, DENIED, (AK, SK), "PG_DENIED",
                 f"User:{AK} is not authorized for WRITE on topic {DENIED}")
    log = server.log_path.read_text(errors="replace")  # whole: log() is its last 20 kB
    assert "Check signature failed for accessKey=RmqWriter1" in log
    assert "No accessKey is configured" in log
    assert f"User:{AK} is not authorized for WRITE on topic {DENIED}" in log
    # nothing arrived: the admin's Kafka view of both topics is empty
    admin = kafka_admin(server)
    for topic in (PROTECTED, DENIED):
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        assert len(partitions) == 4


def signed(ext: Mapping[str, object], body: bytes, ak: str, sk: str) -> dict[str, object]:
    return dict(sign_request({k: ext_str(v) for k, v in ext.items() if v is not None}, body,
                             ak, sk))


async def test_admin_codes_refused_to_anonymous_and_unprivileged(server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        requests: list[tuple[int, dict[str, object]]] = [
            (RC.GET_ALL_TOPIC_CONFIG, {}),
            (RC.DELETE_TOPIC_IN_BROKER, {"topic": PROTECTED}),
            (RC.UPDATE_AND_CREATE_TOPIC, {"topic": "rmq_made_by_nobody", "readQueueNums": 4,
                                          "writeQueueNums": 4, "perm": 6}),
            (RC.GET_BROKER_RUNTIME_INFO, {}),
            (RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}),
        ]
        for code, ext in requests:
            anonymous = await client.call(code, ext)
            assert anonymous.code == NO_PERMISSION, (code, anonymous.remark)
            for ak, sk in ((NOBODY_AK, NOBODY_SK), (AK, SK)):
                answer = await client.call(code, signed(ext, b"", ak, sk))
                assert answer.code == NO_PERMISSION, (code, ak, answer.remark)
        # an anonymous send that would auto-create a topic, and a wrongly signed pull
        send = await client.call(RC.SEND_MESSAGE_V2, send_ext("rmq_auto_made", {}), b"x")
        assert send.code == NO_PERMISSION
        bad = signed({"consumerGroup": GROUP, "topic": PROTECTED, "queueId": 0,
                      "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0,
                      "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0},
                     b"", AK, "wrong-secret")
        assert (await client.call(RC.PULL_MESSAGE, bad)).code == NO_PERMISSION
    finally:
        await client.aclose()
    names = set(kafka_admin(server).list_topics(timeout=10).topics)
    assert PROTECTED in names and not names & {"rmq_made_by_nobody", "rmq_auto_made"}


async def test_name_server_hides_topics_the_principal_may_not_describe(
        server: Standalone) -> None:
    client = await RawClient.connect(name_server(server))
    try:
        anonymous = await client.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": PROTECTED})
        assert anonymous.code == NO_PERMISSION
        route = await client.call(RC.GET_ROUTEINFO_BY_TOPIC,
                                  signed({"topic": PROTECTED}, b"", AK, SK))
        assert route.code == ResponseCode.SUCCESS
        hidden = await client.call(RC.GET_ROUTEINFO_BY_TOPIC,
                                   signed({"topic": PROTECTED}, b"", NOBODY_AK, NOBODY_SK))
        missing = await client.call(RC.GET_ROUTEINFO_BY_TOPIC,
                                    signed({"topic": "rmq_no_such"}, b"", NOBODY_AK, NOBODY_SK))
        assert hidden.code == missing.code == ResponseCode.TOPIC_NOT_EXIST
        listed: dict[str, Any] = {}
        for ak, sk in ((AK, SK), (NOBODY_AK, NOBODY_SK)):
            answer = await client.call(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                                       signed({}, b"", ak, sk))
            assert answer.code == ResponseCode.SUCCESS
            listed[ak] = set(json.loads(answer.body)["topicList"])
        assert PROTECTED in listed[AK]  # WRITE and READ imply DESCRIBE
        assert DENIED not in listed[AK]  # the Kafka DENY ALL covers DESCRIBE
        assert listed[NOBODY_AK] == {DENIED}  # only through the User:* WRITE grant
    finally:
        await client.aclose()


async def test_anonymous_access_when_configured_is_a_warning_and_kafka_acls_decide(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    standalone = secured_standalone(tmp_path_factory.mktemp("rmq-anonymous"),
                                    "[rocketmq.acl]\nallow_anonymous = true\n")
    standalone.start()
    try:
        assert "allow_anonymous: unsigned RocketMQ requests are accepted" in standalone.log()
        grant(standalone, ["rmq_open", "rmq_closed"], [
            acl(ResourceType.TOPIC, "rmq_open", "User:ANONYMOUS", AclOperation.WRITE)])
        client = await RawClient.connect(broker(standalone))
        try:
            ok = await client.call(RC.SEND_MESSAGE_V2, send_ext("rmq_open", {}), b"hello")
            assert ok.code == ResponseCode.SUCCESS, ok.remark
            closed = await client.call(RC.SEND_MESSAGE_V2, send_ext("rmq_closed", {}), b"no")
            assert closed.code == NO_PERMISSION
            deleted = await client.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": "rmq_open"})
            assert deleted.code == NO_PERMISSION
        finally:
            await client.aclose()
    finally:
        standalone.stop()
