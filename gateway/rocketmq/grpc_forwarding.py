"""RocketMQ 5 calls forwarded to the broker that owns their bundle (cluster mode).

A 5.x client's route names the broker that owned a bundle when the client last asked (it asks
every 30 s); after the bundle moved, or for RecallMessage, which clients send to their access
point, the call reaches a broker that does not own it.  The cluster backend then raises
`ForwardTo` with the owner's gRPC endpoint for that bundle, and the listener replays the call's
request message there with the client's own metadata (so the owner authenticates and
authorizes the client exactly as if it had called directly) plus `x-ledgerwire-forwarded`, and
relays the owner's answers and status.  A forwarded call is never forwarded again: a second
miss is answered "not served here", which clients retry.

One HTTP/2 connection per forwarded call (h2, client side, under Trio): forwarding is the
short window after a move, not the steady path.

This module must never forward a call that was already forwarded, nor wait on an owner longer
than the call's own deadline allows.
"""

from __future__ import annotations

import logging
import time

import h2.config
import h2.connection
import h2.events
import trio

from protocols.rocketmq.grpc.framing import GrpcStatus, MessageReader, frame

log = logging.getLogger("ledgerwire.rocketmq.grpc")

FORWARDED_HEADER = "x-ledgerwire-forwarded"
FORWARD_TIMEOUT_S = 45.0  # a ReceiveMessage long poll is at most 30 s
READ_BYTES = 65536
_WARN_EVERY_S = 30.0
_last_warning: dict[tuple[str, int], float] = {}


class ForwardTo(Exception):  # noqa: N818 - a redirection, not an error
    """Serve this call at another broker's gRPC endpoint."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(f"{host}:{port}")
        self.host = host
        self.port = port


def forwarded_metadata(metadata: dict[str, str]) -> list[tuple[str, str]]:
    """What a forwarded call carries: the client's own RocketMQ headers and signature."""
    kept = [(k, v) for k, v in metadata.items()
            if k.startswith("x-mq-") or k == "authorization"]
    return [*kept, (FORWARDED_HEADER, "1")]


async def forward_call(host: str, port: int, path: str, metadata: list[tuple[str, str]],
                       payload: bytes, *, max_message_bytes: int,
                       timeout_s: float = FORWARD_TIMEOUT_S
                       ) -> tuple[list[bytes], GrpcStatus, str]:
    """One unary or server-streaming call at host:port: (response messages, status, message).
    A failure to reach the owner is UNAVAILABLE (one WARNING per owner every 30 s)."""
    try:
        with trio.fail_after(timeout_s):
            return await _call(host, port, path, metadata, payload, max_message_bytes)
    except (OSError, trio.TooSlowError, h2.exceptions.H2Error) as exc:
        now = time.monotonic()
        if now - _last_warning.get((host, port), -_WARN_EVERY_S) >= _WARN_EVERY_S:
            _last_warning[(host, port)] = now
            log.warning("forwarding a RocketMQ 5 call to %s:%d failed: %r", host, port, exc)
        return [], GrpcStatus.UNAVAILABLE, f"the bundle's owner {host}:{port} is unreachable"


async def _call(host: str, port: int, path: str, metadata: list[tuple[str, str]],
                payload: bytes, max_message_bytes: int) -> tuple[list[bytes], GrpcStatus, str]:
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [
            (":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", f"{host}:{port}"), ("content-type", "application/grpc"),
            ("te", "trailers"), *metadata])
        pending = frame(payload)
        reader = MessageReader(max_message_bytes)
        messages: list[bytes] = []
        trailers: dict[str, str] = {}
        while True:
            pending = _send_some(conn, sid, pending)
            data = conn.data_to_send()
            if data:
                await stream.send_all(data)
            received = await stream.receive_some(READ_BYTES)
            if not received:
                return messages, GrpcStatus.UNAVAILABLE, "the owner closed the connection"
            for event in conn.receive_data(received):
                if isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                    messages += reader.feed(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    trailers.update((str(k), str(v)) for k, v in event.headers)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    return messages, GrpcStatus.UNAVAILABLE, "the owner reset the call"
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    status = GrpcStatus(int(trailers.get("grpc-status", GrpcStatus.UNKNOWN)))
                    return messages, status, trailers.get("grpc-message", "")


def _send_some(conn: h2.connection.H2Connection, sid: int, pending: bytes) -> bytes:
    """Send what flow control lets out of the request; what is left (ends the stream when
    everything went)."""
    if not pending:
        return pending
    while pending:
        room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
        if room <= 0:
            return pending
        chunk, pending = pending[:room], pending[room:]
        conn.send_data(sid, chunk, end_stream=not pending)
    return pending
