"""Bounded memory before a RocketMQ 5 (gRPC) call is authenticated, sans-IO.

A call is authenticated from its HTTP/2 headers (gateway/rocketmq/grpc_listener.py finishes a
refused call with UNAUTHENTICATED as soon as `CallStarted` arrives), before any of its message
is read.  This drives `GrpcServerConnection` the way the listener does and checks that what a
refused client sends afterwards - 4 MiB of request message on the refused stream, more than
the server's 1 MiB stream window - is acknowledged and dropped: no message event, no stream
state, nothing buffered; the connection still serves the next (authenticated) call.
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events

from protocols.rocketmq.grpc.connection import CallMessage, CallStarted, GrpcServerConnection
from protocols.rocketmq.grpc.framing import GrpcStatus, frame

MIB = 1 << 20
HEADERS = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", "/apache.rocketmq.v2.MessagingService/SendMessage"),
           ("content-type", "application/grpc")]


def pump(client: h2.connection.H2Connection, server: GrpcServerConnection,
         refused: set[int]) -> tuple[list[object], list[h2.events.Event]]:
    """Exchange bytes until both sides are quiet; refuse each new call in `refused` at once
    (the listener's authentication failure)."""
    server_events: list[object] = []
    client_events: list[h2.events.Event] = []
    while True:
        to_server = client.data_to_send()
        if to_server:
            for event in server.receive(to_server):
                server_events.append(event)
                if isinstance(event, CallStarted) and event.stream_id in refused:
                    server.finish(event.stream_id, GrpcStatus.UNAUTHENTICATED, "no signature")
        to_client = server.data_to_send()
        if to_client:
            client_events += client.receive_data(to_client)
        if not to_server and not to_client:
            return server_events, client_events


def test_a_refused_calls_message_is_dropped_unbuffered() -> None:
    server = GrpcServerConnection(max_message_bytes=5 * MIB)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(1, HEADERS)
    events, answers = pump(client, server, {1})
    assert [type(e) for e in events] == [CallStarted]
    ended = [e for e in answers if isinstance(e, h2.events.ResponseReceived)]
    assert (b"grpc-status", str(int(GrpcStatus.UNAUTHENTICATED)).encode()) in ended[0].headers
    message = frame(b"m" * (4 * MIB))
    sent = 0
    while sent < len(message):  # as much as flow control lets through, then pump
        window = min(client.local_flow_control_window(1), client.max_outbound_frame_size)
        if window <= 0:
            more, _ = pump(client, server, {1})
            assert not any(isinstance(e, CallMessage) for e in more)
            assert client.local_flow_control_window(1) > 0, "the server stopped the stream"
            continue
        chunk = message[sent:sent + window]
        client.send_data(1, chunk, end_stream=sent + len(chunk) == len(message))
        sent += len(chunk)
    more, _ = pump(client, server, {1})
    assert not any(isinstance(e, CallMessage) for e in more)
    assert server.open_calls == 0 and server.buffered(1) == 0
    # the connection serves the next call
    client.send_headers(3, HEADERS)
    client.send_data(3, frame(b"signed"), end_stream=True)
    served, _ = pump(client, server, set())
    assert [e.payload for e in served if isinstance(e, CallMessage)] == [b"signed"]
