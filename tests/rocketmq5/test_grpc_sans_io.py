"""The sans-IO gRPC pieces: message framing and the HTTP/2 server connection, with bytes only."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.rocketmq.grpc.connection import (
    CallHalfClosed,
    CallMessage,
    CallStarted,
    GrpcServerConnection,
    ProtocolViolation,
)
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.framing import GrpcError, GrpcStatus, MessageReader, frame
from protocols.rocketmq.grpc.messages import parse_receipt_handle, receipt_handle


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(1, 64))
def test_messages_survive_any_chunking(payloads: list[bytes], chunk: int) -> None:
    wire = b"".join(frame(p) for p in payloads)
    reader = MessageReader(1024)
    out: list[bytes] = []
    for i in range(0, len(wire), chunk):
        out += reader.feed(wire[i:i + chunk])
    assert out == payloads and reader.pending == 0


def test_oversize_and_compressed_messages_are_refused_before_buffering() -> None:
    reader = MessageReader(100)
    with pytest.raises(GrpcError) as big:
        reader.feed(b"\x00" + (10**9).to_bytes(4, "big"))
    assert big.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    with pytest.raises(GrpcError) as packed:
        MessageReader(100).feed(b"\x01\x00\x00\x00\x01x")
    assert packed.value.status == GrpcStatus.UNIMPLEMENTED


def _client() -> h2.connection.H2Connection:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    return client


def test_a_unary_call_and_its_answer() -> None:
    server = GrpcServerConnection(max_message_bytes=1024)
    client = _client()
    client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                            (":path", "/apache.rocketmq.v2.MessagingService/Heartbeat"),
                            ("content-type", "application/grpc"), ("x-mq-client-id", "c1")])
    client.send_data(1, frame(b"hello"), end_stream=True)
    events = server.receive(client.data_to_send())
    assert [type(e) for e in events] == [CallStarted, CallMessage, CallHalfClosed]
    started = events[0]
    assert isinstance(started, CallStarted) and started.metadata["x-mq-client-id"] == "c1"
    server.send_message(1, b"answer")
    server.finish(1, GrpcStatus.OK)
    replies = client.receive_data(server.data_to_send())
    data = b"".join(e.data for e in replies if isinstance(e, h2.events.DataReceived))
    trailers = [e for e in replies if isinstance(e, h2.events.TrailersReceived)]
    assert data == frame(b"answer")
    assert (b"grpc-status", b"0") in trailers[0].headers


def test_many_calls_in_flight_need_no_window_update() -> None:
    """The connection window is opened wide at once: 1 MB of requests over 64 calls go out
    before the client hears anything more from the server, and all of them arrive."""
    server = GrpcServerConnection(max_message_bytes=64 * 1024)
    client = _client()
    client.receive_data(server.data_to_send())  # the server's preface and window
    body = frame(b"x" * 16_000)  # one DATA frame each
    for stream_id in range(1, 129, 2):
        client.send_headers(stream_id, [(":method", "POST"), (":scheme", "http"),
                                        (":authority", "x"),
                                        (":path", "/apache.rocketmq.v2.MessagingService/Send"),
                                        ("content-type", "application/grpc")])
        client.send_data(stream_id, body, end_stream=True)
    events = server.receive(client.data_to_send())
    assert sum(isinstance(e, CallMessage) for e in events) == 64


@settings(max_examples=200)
@given(st.binary(max_size=2000))
def test_garbage_is_a_protocol_violation_never_a_crash(data: bytes) -> None:
    server = GrpcServerConnection(max_message_bytes=1024)
    try:
        server.receive(data)
    except ProtocolViolation:
        pass


@given(st.integers(0, 2**31), st.integers(0, 2**62), st.integers(1, 100), st.integers(0, 2**40))
def test_receipt_handles_round_trip(partition: int, offset: int, count: int, nonce: int) -> None:
    parsed = parse_receipt_handle(receipt_handle(partition, offset, count, nonce))
    assert (parsed.partition, parsed.offset, parsed.delivery_count) == (partition, offset, count)


@given(st.text(max_size=40))
def test_bad_receipt_handles_are_refused(text: str) -> None:
    try:
        parse_receipt_handle(text)
    except RpcFailure:
        pass


def test_a_client_that_said_goaway_may_still_finish_its_open_stream() -> None:
    """grpc-js closes a channel with GOAWAY and then half-closes its Telemetry stream in the
    same write; h2 alone would refuse that frame (it follows a GOAWAY)."""
    server = GrpcServerConnection(max_message_bytes=1024)
    client = _client()
    client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                            (":path", "/apache.rocketmq.v2.MessagingService/Telemetry"),
                            ("content-type", "application/grpc")])
    client.send_data(1, frame(b"settings"))
    assert [type(e) for e in server.receive(client.data_to_send())] == [CallStarted, CallMessage]
    goaway = b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00"
    client.end_stream(1)
    events = server.receive(goaway + client.data_to_send())
    assert [type(e) for e in events] == [CallHalfClosed] and server.goaway_received
