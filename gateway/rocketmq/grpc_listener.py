"""The RocketMQ 5 gRPC listener: HTTP/2 connections under Trio, one task per call.

Each connection has a reader (bytes into the sans-IO `GrpcServerConnection`, call events out)
and one writer task that owns the socket's write side: whatever changes the connection's
outbound state sets `wake`, and the writer sends what HTTP/2 flow control lets out.  Unary and
server-streaming calls run their handler once the request message and the client's half-close
arrived; Telemetry is a conversation: each command the client writes is answered (settings),
and the backend may push commands (transaction check-back) through the call's sink.  A call
for a method not in the table ends with UNIMPLEMENTED, a bad request message with
INVALID_ARGUMENT, an authentication failure with UNAUTHENTICATED; an HTTP/2 protocol error
closes that connection only.  Shutdown stops accepting, tells clients GOAWAY, and gives calls
`drain_timeout_s` to finish.

This module must never run a handler outside a call's cancel scope, nor write to a socket from
more than one task.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from google.protobuf.message import DecodeError, Message

from gateway.rocketmq.grpc_forwarding import (
    FORWARDED_HEADER,
    ForwardTo,
    forward_call,
    forwarded_metadata,
)
from gateway.rocketmq.listener import open_shared_listener, serve_if_admitted
from gateway.security.connection_limits import ConnectionLimits
from protocols.rocketmq.errors import RocketMQError
from protocols.rocketmq.grpc.auth import needs_telemetry
from protocols.rocketmq.grpc.backend import Caller, MessagingBackend
from protocols.rocketmq.grpc.connection import (
    CallCancelled,
    CallHalfClosed,
    CallMessage,
    CallStarted,
    GrpcServerConnection,
    ProtocolViolation,
)
from protocols.rocketmq.grpc.errors import RpcFailure, failure_of
from protocols.rocketmq.grpc.framing import GrpcStatus
from protocols.rocketmq.grpc.service import (
    METHODS,
    Kind,
    Method,
    failure_response,
    status_of,
    telemetry_reply,
)
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb

log = logging.getLogger("ledgerwire.rocketmq.grpc")

READ_BYTES = 65536
DRAIN_TIMEOUT_S = 5.0
MAX_PUSHED_BYTES = 8 * 1024 * 1024  # a client that stops reading its Telemetry stream

# (metadata, connection) -> principal; raises RpcFailure(UNAUTHORIZED) for a bad signature.
Authenticator = Callable[[dict[str, str], Any], str]


def anonymous(metadata: dict[str, str], conn: Any) -> str:
    return "User:ANONYMOUS"


@dataclass
class _Call:
    method: Method
    caller: Caller
    path: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    messages: list[bytes] = field(default_factory=list)
    inbox: trio.MemorySendChannel[bytes | None] | None = None


class _Connection:
    def __init__(self, stream: trio.SocketStream, backend: MessagingBackend,
                 authenticate: Authenticator, max_message_bytes: int) -> None:
        self.stream = stream
        self.backend = backend
        self.authenticate = authenticate
        self.h2 = GrpcServerConnection(max_message_bytes=max_message_bytes)
        self.max_message_bytes = max_message_bytes
        self.wake = trio.Event()
        self.calls: dict[int, _Call] = {}
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = (str(host), int(port))
        except OSError:
            self.peer = ("0.0.0.0", 0)

    def changed(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self._write_loop)
            try:
                await self._read_loop()
            finally:
                for call in self.calls.values():
                    call.scope.cancel()
                nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            data = self.h2.data_to_send()
            if data:
                await self.stream.send_all(data)

    async def _read_loop(self) -> None:
        self.changed()  # the server preface
        while True:
            try:
                data = await self.stream.receive_some(READ_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            try:
                events = self.h2.receive(data)
            except ProtocolViolation as exc:
                log.warning("closing a gRPC connection from %s:%d: %s", *self.peer, exc)
                self.h2.close()
                await self._flush_now()
                return
            for event in events:
                self._on_event(event)
            if self.h2.goaway_received and not self.calls:
                await self._flush_now()
                return  # the client said GOAWAY and its last call ended
            self.changed()

    async def _flush_now(self) -> None:
        data = self.h2.data_to_send()
        if data:
            with trio.move_on_after(1):
                await self.stream.send_all(data)

    def _on_event(self, event: object) -> None:
        if isinstance(event, CallStarted):
            self._start(event)
        elif isinstance(event, CallMessage):
            call = self.calls.get(event.stream_id)
            if call is None:
                return
            if call.inbox is not None:
                try:
                    call.inbox.send_nowait(event.payload)
                except trio.WouldBlock:
                    self._end(event.stream_id, GrpcStatus.RESOURCE_EXHAUSTED, "too many commands")
            elif call.messages:
                self._end(event.stream_id, GrpcStatus.INVALID_ARGUMENT, "one request expected")
            else:
                call.messages.append(event.payload)
        elif isinstance(event, CallHalfClosed):
            call = self.calls.get(event.stream_id)
            if call is None:
                return
            if call.inbox is not None:
                call.inbox.close()
            elif not call.messages:
                self._end(event.stream_id, GrpcStatus.INVALID_ARGUMENT, "no request message")
            else:
                self.nursery.start_soon(self._serve, event.stream_id, call)
        elif isinstance(event, CallCancelled):
            call = self.calls.pop(event.stream_id, None)
            if call is not None:
                call.scope.cancel()

    def _start(self, event: CallStarted) -> None:
        method = METHODS.get(event.method)
        if method is None:
            self.h2.finish(event.stream_id, GrpcStatus.UNIMPLEMENTED,
                           f"method {event.method} is not served")
            return
        meta = event.metadata
        try:
            principal = self.authenticate(meta, self)
        except RpcFailure as exc:
            log.warning("refused a RocketMQ 5 call from %s:%d: %s", *self.peer, exc.message)
            self.h2.finish(event.stream_id, GrpcStatus.UNAUTHENTICATED, exc.message)
            return
        caller = Caller(meta.get("x-mq-client-id", ""), self.peer, principal,
                        meta.get("x-mq-namespace", ""), FORWARDED_HEADER in meta)
        call = _Call(method, caller, event.method, meta)
        self.calls[event.stream_id] = call
        if method.kind is Kind.BIDI:
            send, receive = trio.open_memory_channel[bytes | None](64)
            call.inbox = send
            self.nursery.start_soon(self._telemetry, event.stream_id, call, receive)

    def _end(self, stream_id: int, status: GrpcStatus, message: str) -> None:
        call = self.calls.pop(stream_id, None)
        if call is not None:
            call.scope.cancel()
        self.h2.finish(stream_id, status, message)
        self.changed()

    def _parse(self, method: Method, payload: bytes, kind: type[Message]) -> Message:
        request = kind()
        request.ParseFromString(payload)
        return request

    async def _serve(self, stream_id: int, call: _Call) -> None:
        method = call.method
        with call.scope:
            try:
                request = self._parse(method, call.messages[0], method.request)
            except DecodeError:
                self._end(stream_id, GrpcStatus.INVALID_ARGUMENT, "malformed request message")
                return
            assert method.handler is not None
            try:
                answer: Any = await method.handler(self.backend, call.caller, request)
            except ForwardTo as owner:
                await self._forward(stream_id, call, owner)
                return
            except Exception as exc:  # noqa: BLE001 - becomes the call's status
                try:
                    answer = failure_response(method, failure_of(exc))
                except Exception:
                    log.exception("RocketMQ 5 %s failed", method.name)
                    self._end(stream_id, GrpcStatus.INTERNAL, "internal error")
                    return
            responses = answer if isinstance(answer, list) else [answer]
            for response in responses:
                self.h2.send_message(stream_id, response.SerializeToString())
            self.calls.pop(stream_id, None)
            self.h2.finish(stream_id, GrpcStatus.OK)
            self.changed()

    async def _forward(self, stream_id: int, call: _Call, owner: ForwardTo) -> None:
        """Relay the call to the bundle's owner (grpc_forwarding.py) and its answer back."""
        messages, status, message = await forward_call(
            owner.host, owner.port, call.path, forwarded_metadata(call.metadata),
            call.messages[0], max_message_bytes=self.max_message_bytes)
        for payload in messages:
            self.h2.send_message(stream_id, payload)
        self.calls.pop(stream_id, None)
        self.h2.finish(stream_id, status, message)
        self.changed()

    async def _telemetry(self, stream_id: int, call: _Call,
                         inbox: trio.MemoryReceiveChannel[bytes | None]) -> None:
        sink = _Sink(self, stream_id)
        opened = False
        try:
            with call.scope:
                async for payload in inbox:
                    if payload is None:
                        break
                    try:
                        command = spb.TelemetryCommand.FromString(payload)
                    except DecodeError:
                        self._end(stream_id, GrpcStatus.INVALID_ARGUMENT, "malformed command")
                        return
                    if command.WhichOneof("command") == "settings":
                        try:  # what the session registers the client for needs the ACLs' yes
                            self.backend.authorize(call.caller, needs_telemetry(command.settings))
                        except (RpcFailure, RocketMQError) as exc:
                            refusal = spb.TelemetryCommand(status=status_of(failure_of(exc)))
                            self.h2.send_message(stream_id, refusal.SerializeToString())
                            break  # the stream ends here, answered
                        self._open_session(call.caller, command.settings, sink)
                        opened = True
                    reply = telemetry_reply(self.backend, call.caller, command)
                    if reply is not None:
                        self.h2.send_message(stream_id, reply.SerializeToString())
                        self.changed()
                self.calls.pop(stream_id, None)
                self.h2.finish(stream_id, GrpcStatus.OK)
                self.changed()
        finally:
            if opened:
                self.backend.close_telemetry(call.caller, sink)

    def _open_session(self, caller: Caller, settings: pb.Settings, sink: _Sink) -> None:
        topics: list[str] = []
        group = None
        if settings.WhichOneof("pub_sub") == "publishing":
            topics = [t.name for t in settings.publishing.topics]
        elif settings.WhichOneof("pub_sub") == "subscription":
            group = settings.subscription.group.name
            topics = [s.topic.name for s in settings.subscription.subscriptions]
        self.backend.open_telemetry(caller, settings.client_type, topics, group, sink)


class _Sink:
    """Commands the broker pushes on one Telemetry stream."""

    def __init__(self, conn: _Connection, stream_id: int) -> None:
        self._conn = conn
        self._stream_id = stream_id

    def push(self, command: bytes) -> bool:
        conn = self._conn
        if not conn.h2.is_open(self._stream_id):
            return False
        if conn.h2.buffered(self._stream_id) > MAX_PUSHED_BYTES:
            return False  # the client is not reading: drop, it will be asked again
        conn.h2.send_message(self._stream_id, command)
        conn.changed()
        return True


async def serve_rocketmq_grpc(backend: MessagingBackend, host: str | None, port: int, *,
                              authenticate: Authenticator = anonymous,
                              max_message_bytes: int = 5 * 1024 * 1024,
                              drain_timeout_s: float = DRAIN_TIMEOUT_S,
                              connection_limits: ConnectionLimits | None = None,
                              on_bound: Callable[[int], None] | None = None,
                              reuse_port: bool = False,
                              task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `backend` on host:port until cancelled; started((host, port)).  With
    `reuse_port` the port is bound with SO_REUSEPORT (a cluster's bundle ports, which another
    broker may adopt: gateway/rocketmq/adoption.py)."""
    listeners = ([await open_shared_listener(host or "0.0.0.0", port)] if reuse_port
                 else await trio.open_tcp_listeners(port, host=host or None))
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    if on_bound is not None:
        on_bound(bound_port)
    live: set[_Connection] = set()

    async def serve_connection(stream: trio.SocketStream) -> None:
        await serve_if_admitted(connection_limits, stream, serve_admitted)

    async def serve_admitted(stream: trio.SocketStream) -> None:
        conn = _Connection(stream, backend, authenticate, max_message_bytes)
        live.add(conn)
        try:
            await conn.run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            live.discard(conn)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async with trio.open_nursery() as connections:
        try:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(functools.partial(
                        trio.serve_listeners, serve_connection, [listener],
                        handler_nursery=connections))
                log.info("rocketmq grpc ready", extra={"address": f"{bound_host}:{bound_port}"})
                task_status.started((bound_host, bound_port))
        finally:
            for conn in list(live):
                conn.h2.close()
                conn.changed()
            connections.cancel_scope.deadline = trio.current_time() + drain_timeout_s
