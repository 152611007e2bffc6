"""The RocketMQ 5 door of a secured standalone (Kafka SASL + ACLs, RocketMQ accounts): 5.x
clients sign with their account's keys and the Kafka ACLs decide, as for the 4.x door."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from confluent_kafka.admin import AclOperation, AclPermissionType, ResourceType

from protocols.rocketmq.grpc.auth import signature
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb
from tests.rocketmq.test_rocketmq_kafka_acls import (
    ACCOUNTS,
    AK,
    NOBODY_AK,
    NOBODY_SK,
    SK,
    acl,
    grant,
)
from tests.rocketmq5.support import received, run5, run5_refused
from tests.support.secured_standalone import secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OPEN, DENIED, GROUP = "r5_protected", "r5_denied", "CG_R5"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("r5-acls"), ACCOUNTS)
    standalone.start()
    try:
        principal = f"User:{AK}"
        grant(standalone, [OPEN, DENIED], [
            acl(ResourceType.TOPIC, OPEN, principal, AclOperation.WRITE),
            acl(ResourceType.TOPIC, OPEN, principal, AclOperation.READ),
            acl(ResourceType.TOPIC, OPEN, principal, AclOperation.DESCRIBE),
            acl(ResourceType.GROUP, GROUP, principal, AclOperation.READ),
            acl(ResourceType.TOPIC, DENIED, "User:*", AclOperation.ALL),
            acl(ResourceType.TOPIC, DENIED, principal, AclOperation.WRITE,
                AclPermissionType.DENY),
        ])
        yield standalone
    finally:
        standalone.stop()


def test_signed_account_with_grants_sends_and_receives(server: Standalone) -> None:
    ep = f"127.0.0.1:{server.rocketmq_grpc_port}"
    keys = ["--ak", AK, "--sk", SK]
    run5("produce", ep, OPEN, "--count", "3", "--prefix", "ok", *keys)
    got = received(run5("receive", ep, OPEN, "--consumer-group", GROUP, "--expect", "3", *keys))
    assert sorted(m["body"] for m in got) == ["ok-0", "ok-1", "ok-2"]


def signed(ak: str, sk: str) -> list[tuple[str, str]]:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return [("x-mq-date-time", stamp), ("x-mq-client-id", "raw-client"),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                              f"SignedHeaders=x-mq-date-time, Signature={signature(sk, stamp)}")]


def send_raw(server: Standalone, topic: str, metadata: list[tuple[str, str]]) -> int:
    """A raw SendMessage; the RocketMQ status code of the answer."""
    request = spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), body=b"raw",
        system_properties=pb.SystemProperties(message_id="RAW0001", message_type=pb.NORMAL))])
    with grpc.insecure_channel(f"127.0.0.1:{server.rocketmq_grpc_port}") as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=spb.SendMessageResponse.FromString)
        return int(call(request, metadata=metadata, timeout=20).status.code)


def test_wrong_secret_unsigned_and_denied_are_refused(server: Standalone) -> None:
    assert send_raw(server, OPEN, signed(AK, SK)) == pb.OK
    for metadata in (signed(AK, "not-the-secret"), [("x-mq-client-id", "anonymous")],
                     signed("NoSuchKey1", "whatever1")):
        with pytest.raises(grpc.RpcError) as refused:
            send_raw(server, OPEN, metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert send_raw(server, DENIED, signed(AK, SK)) == pb.FORBIDDEN  # a Kafka DENY
    assert send_raw(server, OPEN, signed(NOBODY_AK, NOBODY_SK)) == pb.FORBIDDEN  # no grant
    # The real client with a wrong secret cannot even learn the route.
    ep = f"127.0.0.1:{server.rocketmq_grpc_port}"
    run5_refused("produce", ep, OPEN, "--ak", AK, "--sk", "not-the-secret")
    run5_refused("receive", ep, OPEN, "--consumer-group", GROUP, "--ak", NOBODY_AK,
                 "--sk", NOBODY_SK, "--max-seconds", "5")
    log = server.log()
    assert "signature check failed" in log and "requires signed requests" in log
