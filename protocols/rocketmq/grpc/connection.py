"""A gRPC server connection over HTTP/2, sans-IO: bytes in, call events out, bytes to send.

`GrpcServerConnection` drives an `h2` connection (itself sans-IO) and turns its events into
calls: `CallStarted` (a stream with a method path and its metadata), `CallMessage` (one whole
request message), `CallHalfClosed` (the client sent everything), `CallCancelled` (the client
reset the stream).  Answers go out through `start_response`, `send_message` and `finish`
(trailers with `grpc-status`), queued per stream and released as HTTP/2 flow control allows:
`data_to_send()` returns what may be written now, and `buffered(stream)` tells a caller how
much of a stream's answer still waits for the client's window (server streams use it for
back-pressure).

Limits: request messages larger than `max_message_bytes` end their call with
RESOURCE_EXHAUSTED before they are buffered; at most `max_concurrent_streams` calls are open
(HTTP/2 SETTINGS, enforced by h2); header lists over 16 KiB are refused.  An HTTP/2 protocol
error raises `ProtocolViolation`, and the connection is then to be closed.

This module never touches sockets, Trio or the broker.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from protocols.rocketmq.grpc.framing import GrpcError, GrpcStatus, MessageReader, frame
from protocols.rocketmq.grpc.static_headers import StaticHeaderEncoder

MAX_HEADER_LIST_BYTES = 16 * 1024
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = 9
GOAWAY = 0x7
MAX_FRAME_BYTES = 16384  # h2's default SETTINGS_MAX_FRAME_SIZE, which this server keeps
INITIAL_WINDOW_BYTES = 1024 * 1024
# The connection's receive window.  Data is acknowledged as it arrives (each call buffers at most
# one message), so this bounds nothing; a large one lets clients keep many calls in flight
# without waiting for a WINDOW_UPDATE every 32 KiB (HTTP/2's default is 64 KiB).
CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024
DEFAULT_WINDOW_BYTES = 65535
RESPONSE_HEADERS = ((b":status", b"200"), (b"content-type", b"application/grpc"))


def _text(item: bytes | str) -> str:
    return item if isinstance(item, str) else item.decode("utf-8", "replace")


class ProtocolViolation(Exception):
    """The peer broke HTTP/2; close the connection."""


@dataclass(frozen=True)
class CallStarted:
    stream_id: int
    method: str  # "/apache.rocketmq.v2.MessagingService/SendMessage"
    metadata: dict[str, str]


@dataclass(frozen=True)
class CallMessage:
    stream_id: int
    payload: bytes


@dataclass(frozen=True)
class CallHalfClosed:
    stream_id: int


@dataclass(frozen=True)
class CallCancelled:
    stream_id: int


CallEvent = CallStarted | CallMessage | CallHalfClosed | CallCancelled


@dataclass
class _Stream:
    reader: MessageReader
    outbound: bytearray = field(default_factory=bytearray)
    headers_sent: bool = False
    trailers: list[tuple[bytes, bytes]] | None = None
    closed: bool = False


class GrpcServerConnection:
    def __init__(self, *, max_message_bytes: int, max_concurrent_streams: int = 128) -> None:
        # Outbound headers are ours and fixed; inbound ones are only looked up by name, so
        # h2's per-header validation and normalisation (a large share of its CPU) are skipped,
        # inbound headers stay bytes (decoded here, once), and outbound ones are encoded once
        # each without the dynamic table (static_headers.py).
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False, header_encoding=None,
                validate_outbound_headers=False, normalize_outbound_headers=False,
                validate_inbound_headers=False, normalize_inbound_headers=False,
            )
        )
        self._h2.encoder = StaticHeaderEncoder()  # type: ignore[assignment]
        self._max_message = max_message_bytes
        self._streams: dict[int, _Stream] = {}
        self._inbound = bytearray()
        self._preface_left = len(PREFACE)
        self.goaway_received = False
        self._h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: INITIAL_WINDOW_BYTES,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
            },
        )
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW_BYTES - DEFAULT_WINDOW_BYTES)

    # ---- input --------------------------------------------------------------------------
    def receive(self, data: bytes) -> list[CallEvent]:
        try:
            events = self._h2.receive_data(self._without_goaway(data))
        except h2.exceptions.ProtocolError as exc:
            raise ProtocolViolation(str(exc)) from exc
        out: list[CallEvent] = []
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._on_request(event, out)
            elif isinstance(event, h2.events.DataReceived):
                self._on_data(event, out)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self._streams.get(event.stream_id)
                if stream is not None and not stream.closed:
                    out.append(CallHalfClosed(event.stream_id))
            elif isinstance(event, h2.events.StreamReset):
                if self._streams.pop(event.stream_id, None) is not None:
                    out.append(CallCancelled(event.stream_id))
            elif isinstance(event, h2.events.ConnectionTerminated):
                for stream_id in list(self._streams):
                    out.append(CallCancelled(stream_id))
                self._streams.clear()
            elif isinstance(event, h2.events.WindowUpdated):
                self._flush_all()
        return out

    def _without_goaway(self, data: bytes) -> bytes:
        """The bytes for h2, with a client's GOAWAY frames taken out.

        HTTP/2 lets a client that sent GOAWAY finish its open streams (a RocketMQ client's
        Telemetry stream half-closes right after it), but h2 refuses every frame after one;
        so GOAWAY is noted here (no new calls are expected, the listener closes the
        connection once the open ones ended) and never reaches h2.  Frames are cut at their
        9-byte headers; one longer than our SETTINGS_MAX_FRAME_SIZE is h2's to refuse."""
        self._inbound += data
        passed = bytearray()
        if self._preface_left:
            take = min(self._preface_left, len(self._inbound))
            passed += self._inbound[:take]
            del self._inbound[:take]
            self._preface_left -= take
        while len(self._inbound) >= FRAME_HEADER:
            length = int.from_bytes(self._inbound[:3], "big")
            if length > MAX_FRAME_BYTES:
                passed += self._inbound  # h2 refuses it with FRAME_SIZE_ERROR
                self._inbound.clear()
                break
            if len(self._inbound) < FRAME_HEADER + length:
                break
            if self._inbound[3] == GOAWAY:
                self.goaway_received = True
            else:
                passed += self._inbound[:FRAME_HEADER + length]
            del self._inbound[:FRAME_HEADER + length]
        return bytes(passed)

    @property
    def open_calls(self) -> int:
        return len(self._streams)

    def _on_request(self, event: h2.events.RequestReceived, out: list[CallEvent]) -> None:
        try:  # bytes, as h2 gives them without a header_encoding
            headers = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
                       for k, v in event.headers or ()}  # type: ignore[union-attr]
        except AttributeError:
            headers = {_text(k): _text(v) for k, v in event.headers or ()}
        stream_id = event.stream_id
        self._streams[stream_id] = _Stream(MessageReader(self._max_message))
        method = headers.pop(":path", "")
        if headers.get(":method") != "POST" or not headers.get(
            "content-type", ""
        ).startswith("application/grpc"):
            self.finish(stream_id, GrpcStatus.UNIMPLEMENTED, "not a gRPC request")
            return
        for pseudo in [k for k in headers if k.startswith(":")]:
            del headers[pseudo]
        out.append(CallStarted(stream_id, method, headers))

    def _on_data(self, event: h2.events.DataReceived, out: list[CallEvent]) -> None:
        stream_id = event.stream_id
        if event.flow_controlled_length:
            # Each call's buffering is bounded by the message limit, so the window is returned
            # at once; a client cannot make the server hold more than one message per call.
            self._h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
        stream = self._streams.get(stream_id)
        if stream is None or stream.closed:
            return
        try:
            messages = stream.reader.feed(event.data or b"")
        except GrpcError as exc:
            stream.closed = True
            self.finish(stream_id, exc.status, exc.message)
            out.append(CallCancelled(stream_id))
            return
        out.extend(CallMessage(stream_id, m) for m in messages)

    # ---- output -------------------------------------------------------------------------
    def start_response(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.headers_sent:
            return
        stream.headers_sent = True
        self._h2.send_headers(stream_id, RESPONSE_HEADERS)

    def send_message(self, stream_id: int, payload: bytes) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return
        self.start_response(stream_id)
        stream.outbound += frame(payload)
        self._flush(stream_id, stream)

    def finish(self, stream_id: int, status: GrpcStatus, message: str = "") -> None:
        """End the call with trailers (a trailers-only answer when nothing was sent yet)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return
        trailers = [(b"grpc-status", b"%d" % int(status))]
        if message:
            trailers.append((b"grpc-message",
                             urllib.parse.quote(message, safe=" ").encode("ascii")))
        if not stream.headers_sent:
            stream.headers_sent = True
            headers = [*RESPONSE_HEADERS, *trailers]
            self._send_end(stream_id, headers)
            return
        stream.trailers = trailers
        self._flush(stream_id, stream)

    def buffered(self, stream_id: int) -> int:
        stream = self._streams.get(stream_id)
        return len(stream.outbound) if stream is not None else 0

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def data_to_send(self) -> bytes:
        return self._h2.data_to_send()

    def close(self) -> None:
        self._h2.close_connection()

    def _flush_all(self) -> None:
        for stream_id, stream in list(self._streams.items()):
            self._flush(stream_id, stream)

    def _flush(self, stream_id: int, stream: _Stream) -> None:
        while stream.outbound:
            try:
                window = self._h2.local_flow_control_window(stream_id)
            except h2.exceptions.StreamClosedError:
                self._streams.pop(stream_id, None)
                return
            size = min(window, self._h2.max_outbound_frame_size, len(stream.outbound))
            if size <= 0:
                return
            self._h2.send_data(stream_id, bytes(stream.outbound[:size]))
            del stream.outbound[:size]
        if stream.trailers is not None:
            self._send_end(stream_id, stream.trailers)

    def _send_end(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        try:
            self._h2.send_headers(stream_id, headers, end_stream=True)
        except h2.exceptions.StreamClosedError:
            pass
        self._streams.pop(stream_id, None)

    def reset(self, stream_id: int) -> None:
        """Abandon a call (the server is going away or the call misbehaved)."""
        if self._streams.pop(stream_id, None) is not None:
            try:
                self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.StreamClosedError:
                pass
