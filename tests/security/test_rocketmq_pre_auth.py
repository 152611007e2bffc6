"""Bounded memory before a RocketMQ 4.x connection is authenticated, on a real secured standalone.

The broker takes only signed requests (Kafka SASL and ACLs on, one RocketMQ account), with
`[rocketmq.acl] pre_auth_max_frame_bytes` at 256 KiB and `pre_auth_timeout_ms` at 2 s:

- four connections announcing 15 MiB frames (under the 16 MiB limit of a logged-in
  connection) and sending 14 MiB of each before any signed request are closed unread (the
  broker's RSS stays within 16 MiB of where it was; buffered, they would take 56 MiB);
- an unsigned send is answered NO_PERMISSION from its header (its body is dropped unread) and
  the same connection then logs in with a signed send;
- a signed 512 KiB send is refused (the connection closed) as a first request, and accepted on a
  connection whose first request was authenticated;
- a connection that proves nothing within the timeout is closed, on the broker port and on
  the name server's;
- a header nested deeper than Python's stack closes that connection only (json.loads raised
  RecursionError, which took the whole standalone down);
- `[rocketmq] max_connections_per_ip` (5 here) counts the name server, broker and gRPC ports
  together: the connections past it are closed at once, and a closed one makes room.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import grpc
import pytest
import trio
from confluent_kafka.admin import AclOperation, ResourceType

from protocols.rocketmq.codec import encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.rocketmq.test_rocketmq_kafka_acls import acl, grant, signed
from tests.security.test_resource_bounds import rss_bytes
from tests.support.secured_standalone import running, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AK, SK = "RmqPreAuth1", "RmqPreAuthSecret1"
TOPIC = "rmq_pre_auth"
MIB = 1 << 20
PER_IP = 5
CONFIG = f"""
[rocketmq]
max_connections_per_ip = {PER_IP}

[rocketmq.acl]
pre_auth_max_frame_bytes = {256 * 1024}
pre_auth_timeout_ms = 2000

[[rocketmq.acl.accounts]]
access_key = "{AK}"
secret_key = "{SK}"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("rmq-pre-auth"), CONFIG)
    with running(standalone):
        grant(standalone, [TOPIC], [acl(ResourceType.TOPIC, TOPIC, f"User:{AK}",
                                        AclOperation.WRITE)])
        yield standalone


def broker(server: Standalone) -> str:
    return f"127.0.0.1:{server.rocketmq_broker_port}"


async def closed_by_server(client: RawClient, wait_s: float) -> bool:
    """Does the server close the connection within wait_s (answers before that are skipped)?"""
    with trio.move_on_after(wait_s):
        try:
            while await client.receive(wait_s) is not None:
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        return True
    return False


async def signed_send(client: RawClient, body: bytes) -> int:
    answer = await client.call(RC.SEND_MESSAGE_V2, signed(send_ext(TOPIC, {}), body, AK, SK),
                               body, wait_s=30)
    return int(answer.code)


async def test_oversize_frame_before_login_closes_unread(server: Standalone) -> None:
    await trio.sleep(1.0)  # let start-up allocations settle
    before = rss_bytes(server)
    clients = [await RawClient.connect(broker(server)) for _ in range(4)]
    try:
        for client in clients:
            try:  # 15 MiB: under the 16 MiB frame limit of a logged-in connection
                await client.send_raw(struct.pack(">iI", 15 * MIB, 200))
                for _ in range(14):
                    await client.send_raw(b"\0" * MIB)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # closed by the broker while sending: the point
        for client in clients:
            assert await closed_by_server(client, 10)
        grown = rss_bytes(server) - before
        print(f"15 MiB frames before login: RSS grew by {grown / MIB:.1f} MiB")
        assert grown < 16 * MIB  # buffered, the four frames would take 56 MiB
    finally:
        for client in clients:
            await client.aclose()
    assert "before authentication exceeds" in server.log()


async def test_unsigned_send_refused_from_its_header_then_signed_send_logs_in(
        server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        body = b"u" * (200 * 1024)
        unsigned = await client.call(RC.SEND_MESSAGE_V2, send_ext(TOPIC, {}), body)
        assert unsigned.code == ResponseCode.NO_PERMISSION
        assert "No accessKey" in (unsigned.remark or "")
        unknown = await client.call(RC.SEND_MESSAGE_V2,
                                    signed(send_ext(TOPIC, {}), body, "RmqNobodyKnown", SK),
                                    body)
        assert unknown.code == ResponseCode.NO_PERMISSION
        assert await signed_send(client, b"hello") == ResponseCode.SUCCESS
    finally:
        await client.aclose()


async def test_large_frames_only_after_login(server: Standalone) -> None:
    big = b"b" * (512 * 1024)  # over the pre-auth cap, under max.message.bytes
    first = await RawClient.connect(broker(server))
    try:
        request = make_request(RC.SEND_MESSAGE_V2, signed(send_ext(TOPIC, {}), big, AK, SK),
                               big)
        try:
            await first.send_raw(encode_command(request))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        assert await closed_by_server(first, 10)
    finally:
        await first.aclose()
    client = await RawClient.connect(broker(server))
    try:
        assert await signed_send(client, b"small first") == ResponseCode.SUCCESS
        assert await signed_send(client, big) == ResponseCode.SUCCESS
    finally:
        await client.aclose()


@pytest.mark.parametrize("port", ["rocketmq_broker_port", "name_server_port"])
async def test_connection_that_does_not_log_in_is_closed(server: Standalone, port: str
                                                         ) -> None:  # fmt: skip
    client = await RawClient.connect(f"127.0.0.1:{getattr(server, port)}")
    try:
        answer = await client.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        assert answer.code == ResponseCode.NO_PERMISSION
        started = trio.current_time()
        assert await closed_by_server(client, 15)
        assert trio.current_time() - started < 15
    finally:
        await client.aclose()
    assert "did not authenticate in time" in server.log()


async def test_deeply_nested_header_closes_only_that_connection(server: Standalone) -> None:
    header = b"[" * 60_000  # json.loads raises RecursionError on it, not ValueError
    client = await RawClient.connect(broker(server))
    try:
        await client.send_raw(struct.pack(">iI", 4 + len(header), len(header)) + header)
        assert await closed_by_server(client, 10)
    finally:
        await client.aclose()
    other = await RawClient.connect(broker(server))
    try:
        assert await signed_send(other, b"still serving") == ResponseCode.SUCCESS
    finally:
        await other.aclose()


async def logged_in(addr: str, name_server: bool = False) -> RawClient | None:
    """A connection whose signed request was answered, or None if the broker closed it."""
    client = await RawClient.connect(addr)
    try:
        if name_server:
            answer = await client.call(RC.GET_ROUTEINFO_BY_TOPIC,
                                       signed({"topic": TOPIC}, b"", AK, SK), wait_s=10)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        else:
            assert await signed_send(client, b"counted") == ResponseCode.SUCCESS
        return client
    except (AssertionError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        assert "connection closed" in str(exc) or not isinstance(exc, AssertionError), exc
        await client.aclose()
        return None


def grpc_refused(server: Standalone) -> bool:
    """Is a RocketMQ 5 call from this address turned away (UNAVAILABLE: closed at accept)?"""
    request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
    with grpc.insecure_channel(f"127.0.0.1:{server.rocketmq_grpc_port}") as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=spb.QueryRouteResponse.FromString)
        try:
            call(request, timeout=5)
        except grpc.RpcError as exc:
            return exc.code() in (grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED)
    return False


async def test_connections_per_ip_are_limited_across_the_rocketmq_ports(
        server: Standalone) -> None:
    clients = [await logged_in(f"127.0.0.1:{server.name_server_port}", name_server=True)]
    try:
        for _ in range(PER_IP + 1):
            clients.append(await logged_in(broker(server)))
        assert [c is not None for c in clients] == [True] * PER_IP + [False, False]
        assert await trio.to_thread.run_sync(grpc_refused, server)
        first = clients.pop(0)
        assert first is not None
        await first.aclose()
        again = None
        for _ in range(100):  # the broker sees the close: a new connection is admitted
            again = await logged_in(broker(server))
            if again is not None:
                break
            await trio.sleep(0.1)
        assert again is not None
        clients.append(again)
    finally:
        for client in clients:
            if client is not None:
                await client.aclose()
    assert "max_connections_per_ip=5 reached" in server.log()
