"""The Kafka TCP listener: accepts connections and runs each one's request/response loop.

Shape (Trio): one nursery per server; accept loops hand connections to a connections nursery;
one task per connection reads frames with `FrameReader` and starts one task per request, so
requests on a connection run concurrently, while a single writer task per connection sends the
responses strictly in request order (Kafka clients match responses by position as much as by
correlation id).  At most `max_in_flight_per_connection` requests per connection are pending;
beyond that the reader stops reading (backpressure through TCP).

Failure rules: an oversize frame is refused from its size prefix, before its body is read into
memory, and closes that connection; a malformed request closes that connection only (logged
with the client's address); an unsupported version gets the protocol's error where one can be
expressed (see KafkaBroker); Produce with acks=0 gets no response.

Writing (gateway/kafka/reply_sending.py): a handler's answer is a list of buffers (stored
record batches among them, uncopied); the writer takes every answer that is already done, in
order, and sends them all with one vectored `sendmsg` (plain TCP) or one joined `send_all`
(TLS). Each send has `write_timeout_s`; a client that stops reading is disconnected. Both that
and the idle timeout are watched by one per-connection watchdog task that looks every quarter
of the shorter timeout (so a timeout fires between 1x and 1.25x its value), not by a cancel
scope around every receive and send.

Security: connections past the listener's limits are refused, and with an `ssl_context` every
connection is wrapped in a `trio.SSLStream` (gateway/kafka/admission.py: limits, handshake, the
certificate's principal on an SSL listener), read with gateway/security/tls_receive.py's
`receive_ready` (every TLS record already received per call, not one).  With
`sasl_mechanisms` every connection carries a `SaslSession` (protocols/kafka/sasl.py) in its
context: until it is authenticated, frames are served one at a time, in the read loop (the
session's state decides what the next frame may be), only ApiVersions / SaslHandshake /
SaslAuthenticate are accepted -- anything else closes the connection -- and a failed login
closes it once its answer is written.  After SaslHandshake v0 the tokens arrive as raw
size-prefixed frames and are answered the same way.

Graceful shutdown: when the server task is cancelled it stops accepting, stops reading new
requests, gives in-flight requests `drain_timeout_s` to finish and be written, then cancels
them.  The connections nursery is shielded so outside cancellation cannot cut that drain short;
its own deadline bounds it.

This module must never decode or encode Kafka messages itself, or touch partition data.
"""

from __future__ import annotations

import functools
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import trio

from gateway.kafka.admission import (
    ConnectionLimits,
    ConnectionRefused,
    certificate_identity,
    tls_handshake,
)
from gateway.kafka.broker import CloseConnection, KafkaBroker
from gateway.kafka.reply_sending import Reply, send_buffers
from gateway.listeners.accept_loop import accept_forever
from gateway.security.tls_receive import receive_ready
from ledger_backend.faults import log_failure
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    KafkaProtocolError,
    MalformedRequestError,
    UnsupportedVersionError,
)
from protocols.kafka.framing import FrameReader
from protocols.kafka.handlers.sasl import authenticate_token
from protocols.kafka.sasl import SASL_HANDSHAKE, SaslSession, SaslState
from protocols.kafka.ssl_principal import (
    CertificateIdentity,
    SslPrincipalMapper,
)

log = logging.getLogger("ledgerwire.kafka.listener")

RECEIVE_BYTES = 256 * 1024
FETCH_API_KEY = 1


class ListenAddress(NamedTuple):
    host: str
    port: int


def _api_key_of(frame: bytes) -> int:
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1


def _peer_name(stream: trio.abc.Stream) -> str:
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "?"
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return "?"
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _answers_clients(broker: Any) -> bool:
    """A cluster broker takes client connections only once its ownership knows the cluster
    (OwnershipService.answers_clients); until then a client is closed at once, as if the
    broker were not up yet, and asks another broker."""
    ownership = getattr(broker, "ownership", None)
    return ownership is None or bool(getattr(ownership, "answers_clients", True))


class _Connection:
    def __init__(self, server: _KafkaServer, stream: trio.abc.Stream) -> None:
        self.server = server
        self.broker = server.broker
        self.stream = stream
        self.peer = _peer_name(stream)
        self.read_scope = trio.CancelScope()
        self.pending = 0
        # plain TCP: the socket, for vectored sends; None (TLS): joined send_all
        self.socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.receiving = False  # the read loop waits for bytes (idle watchdog)
        self.receive_started = 0.0
        self.send_started: float | None = None  # the writer is sending since (watchdog)
        self.write_scope = trio.CancelScope()
        self.identity: CertificateIdentity | None = None  # SSL listener: the certificate's
        self.fetch_slots = trio.Semaphore(max(1, self.broker.config.fetch_answers_per_connection))

    def stop_reading(self) -> None:
        self.read_scope.cancel()

    async def run(self) -> None:
        config = self.broker.config
        send, receive = trio.open_memory_channel[Reply](config.max_in_flight_per_connection)
        async with self.stream:
            async with trio.open_nursery() as nursery:
                watchdog = trio.CancelScope()
                nursery.start_soon(self._watchdog, watchdog)
                nursery.start_soon(self._write_loop, receive, nursery.cancel_scope, watchdog)
                async with send:
                    with self.read_scope:
                        await self._read_until_closed(send, nursery)

    async def _read_until_closed(self, send: trio.MemorySendChannel[Reply],
                                 nursery: trio.Nursery) -> None:
        try:
            await self._read_loop(send, nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("connection lost", extra={"client": self.peer})
            nursery.cancel_scope.cancel()
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", self.peer, exc,
                        extra={"client": self.peer, "reason": str(exc)})
            nursery.cancel_scope.cancel()
        except (MalformedRequestError, UnicodeError) as exc:
            log.warning("closing connection from %s after a malformed "
                        "request: %s", self.peer, exc,
                        extra={"client": self.peer, "error": str(exc)})
            nursery.cancel_scope.cancel()

    async def _watchdog(self, scope: trio.CancelScope) -> None:
        """Close an idle connection, and one whose client stopped reading (module doc)."""
        idle_timeout = self.broker.config.idle_timeout_s
        write_timeout = self.broker.config.write_timeout_s
        period = max(min(idle_timeout, write_timeout) / 4, 0.01)
        with scope:
            while True:
                await trio.sleep(period)
                now = trio.current_time()
                started = self.send_started
                if started is not None and now - started >= write_timeout:
                    self.write_scope.cancel()
                if self.receiving and now - self.receive_started >= idle_timeout:
                    if self.pending == 0:
                        log.info("closing idle connection", extra={"client": self.peer})
                        self.read_scope.cancel()
                    else:  # requests are still running: wait another full period
                        self.receive_started = now

    async def _read_loop(self, send: trio.MemorySendChannel[Reply],
                         nursery: trio.Nursery) -> None:
        config = self.broker.config
        reader = FrameReader(config.max_frame_bytes)
        ctx = self.broker.new_context(self.peer)
        session: SaslSession | None = None
        if self.server.sasl_mechanisms is not None:
            session = SaslSession(self.server.sasl_mechanisms)
            ctx.session = session
            # Before login a frame is refused above sasl.server.max.receive.size, before
            # anything of its body is buffered (the FrameReader checks the size prefix).
            reader.max_frame_bytes = min(config.max_frame_bytes,
                                         config.max_pre_auth_frame_bytes)
        elif self.identity is not None:
            ctx.session = self.identity
        receive_some: Callable[[int], Awaitable[bytes | bytearray]] = self.stream.receive_some
        if isinstance(self.stream, trio.SSLStream):  # every record already there, not just one
            receive_some = functools.partial(receive_ready, self.stream)
        info = ctx.connection_info
        while True:
            self.receive_started = trio.current_time()
            self.receiving = True
            try:
                data = await receive_some(RECEIVE_BYTES)
            finally:
                self.receiving = False
            if not data:
                return  # the client closed its side; pending answers still go out
            for frame in reader.feed(data):
                # Served inline: a login, and a re-authentication (KIP-368) once it starts.
                inline = session is not None and (
                    not session.authenticated or _api_key_of(frame) == SASL_HANDSHAKE)
                if session is not None and not inline and \
                        session.expired(trio.current_time()):
                    raise CloseConnection("the SASL session expired without "
                                          "re-authentication (connections_max_reauth_ms)")
                if session is not None and inline:
                    await self._authenticate_step(ctx, session, frame, send)
                    if session.failed:
                        return  # the answer (if any) still goes out, then the connection closes
                    if session.authenticated:
                        reader.max_frame_bytes = config.max_frame_bytes
                    continue
                if info:
                    mute_until = info.pop("mute_until", None)
                    if mute_until is not None:  # a client quota throttles it (KIP-219): the
                        await trio.sleep_until(mute_until)  # next request waits until then
                reply = Reply()
                try:
                    header, body = self.broker.decode(frame)
                except UnsupportedVersionError as exc:
                    reply.finish([self.broker.answer_unsupported_version(exc)])
                    await send.send(reply)
                    continue
                if header.api_key == FETCH_API_KEY:
                    # At most fetch_answers_per_connection Fetch answers in memory: stop
                    # reading this connection until the writer has sent an earlier one.
                    await self.fetch_slots.acquire()
                    reply.fetch_slot = self.fetch_slots
                self.pending += 1
                try:
                    send.send_nowait(reply)  # no scheduling round trip while there is room
                except trio.WouldBlock:
                    await send.send(reply)
                # Taken in read order, right before the task starts (see request_order).
                request_ctx = self.broker.request_context(ctx, header)
                nursery.start_soon(self._serve_request, request_ctx, header, body, reply)

    async def _authenticate_step(self, ctx: Any, session: SaslSession, frame: bytes,
                                 send: trio.MemorySendChannel[Reply]) -> None:
        """Serve one frame of a not yet authenticated connection, inline (see module doc)."""
        reply = Reply()
        if session.raw_tokens and session.state in (SaslState.AWAIT_TOKEN,
                                                     SaslState.AWAIT_SCRAM_FINAL):
            try:
                token_reply = await authenticate_token(ctx, bytes(frame))
            except KafkaProtocolError:
                session.state = SaslState.FAILED  # v0 has no error frame: just close
                await trio.sleep(self.broker.config.failed_authentication_delay_s)
                return
            reply.finish([struct.pack(">i", len(token_reply)) + token_reply])
            await send.send(reply)
            return
        try:
            header, body = self.broker.decode(frame)
        except UnsupportedVersionError as exc:
            reply.finish([self.broker.answer_unsupported_version(exc)])
            await send.send(reply)
            return
        if not session.allows(header.api_key):
            session.state = SaslState.FAILED
            raise CloseConnection(
                f"api key {header.api_key} before SASL authentication completed")
        request_ctx = self.broker.request_context(ctx, header)
        reply.finish(await self.broker.handle_to_buffers(request_ctx, header, body))
        if session.failed:  # connection.failed.authentication.delay.ms: slow down guessing
            await trio.sleep(self.broker.config.failed_authentication_delay_s)
        await send.send(reply)

    async def _serve_request(self, ctx: Any, header: RequestHeader, body: dict,
                             reply: Reply) -> None:
        try:
            frame = await self.broker.handle_to_buffers(ctx, header, body)
        except CloseConnection as exc:
            log.warning("closing connection", extra={"client": self.peer, "reason": str(exc)})
            reply.finish(None, close=True)
        except Exception:
            log.exception("request failed; closing the connection",
                          extra={"client": self.peer, "api_key": header.api_key,
                                 "api_version": header.api_version})
            reply.finish(None, close=True)
        else:
            reply.finish(frame)
        finally:
            self.pending -= 1

    async def _write_loop(self, receive: trio.MemoryReceiveChannel[Reply],
                          connection_scope: trio.CancelScope,
                          watchdog: trio.CancelScope) -> None:
        try:
            await self._write_replies(receive, connection_scope)
        finally:
            watchdog.cancel()  # the watchdog lives as long as there may be answers to send

    async def _write_replies(self, receive: trio.MemoryReceiveChannel[Reply],
                             connection_scope: trio.CancelScope) -> None:
        """Send the answers in request order, every answer already done in one send."""
        head: Reply | None = None
        async with receive:
            with self.write_scope:
                while True:
                    if head is None:
                        try:
                            head = receive.receive_nowait()
                        except trio.WouldBlock:
                            try:
                                head = await receive.receive()
                            except trio.EndOfChannel:
                                return
                        except trio.EndOfChannel:
                            return
                    if not head.done.is_set():
                        await head.done.wait()
                    reply, head = head, None
                    buffers: list[Any] = []
                    slots: list[trio.Semaphore] = []
                    close = False
                    while True:  # take the answers that are ready, stopping at the first not
                        if reply.close:
                            close = True
                            break
                        if reply.frame is not None:
                            buffers += reply.frame
                        if reply.fetch_slot is not None:
                            slots.append(reply.fetch_slot)
                        try:
                            reply = receive.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        if not reply.done.is_set():
                            head = reply
                            break
                    if buffers:
                        self.send_started = trio.current_time()
                        try:
                            await send_buffers(self.stream, self.socket, buffers)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            connection_scope.cancel()
                            return
                        self.send_started = None
                    for slot in slots:  # the Fetch answers are out of memory: read on
                        slot.release()
                    if close:
                        connection_scope.cancel()
                        return
        log.warning("closing connection from %s: it stopped reading answers",
                    self.peer, extra={"client": self.peer})
        connection_scope.cancel()



class _KafkaServer:
    def __init__(self, broker: KafkaBroker, drain_timeout_s: float, *,
                 ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanisms: tuple[str, ...] | None = None,
                 ssl_principal: SslPrincipalMapper | None = None) -> None:
        self.broker = broker
        self.ssl_context = ssl_context
        self.sasl_mechanisms = sasl_mechanisms
        self.ssl_principal = ssl_principal
        self.drain_timeout_s = drain_timeout_s
        self.connections: set[_Connection] = set()
        self.limits = ConnectionLimits(broker.config.max_connections,
                                       broker.config.max_connections_per_ip)
        self._closing = trio.Event()

    async def open_connections(self, nursery: trio.Nursery) -> trio.Nursery:
        """Start the (shielded) connections nursery as a task of `nursery` and return it.

        Not `nursery.start`: a start cancelled before the task reports leaves the task in
        trio's temporary nursery, where its shielded wait for a drain would never end. Here
        the wait for the nursery is the caller's own (cancellable), and a drain asked for
        meanwhile (begin_drain in the caller's `finally`) ends the task however early."""
        ready: list[trio.Nursery] = []
        started = trio.Event()
        nursery.start_soon(self._run_connections, ready, started)
        await started.wait()
        return ready[0]

    async def _run_connections(self, ready: list[trio.Nursery], started: trio.Event) -> None:
        """Own the connections nursery until a drain is asked for and completes."""
        async with trio.open_nursery() as connections:
            connections.cancel_scope.shield = True
            ready.append(connections)
            started.set()
            await self._closing.wait()
            connections.cancel_scope.deadline = trio.current_time() + self.drain_timeout_s
            for connection in list(self.connections):
                connection.stop_reading()
        if connections.cancel_scope.cancelled_caught:
            log.warning("drain deadline passed; in-flight requests were cancelled")

    def begin_drain(self) -> None:
        self._closing.set()

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        if self._closing.is_set() or not _answers_clients(self.broker):
            await stream.aclose()
            return
        host = _peer_name(stream).rpartition(":")[0]
        try:
            with self.limits.admitted(host):
                await self._serve_admitted(stream)
        except ConnectionRefused as exc:
            log.info("connection refused: %s", exc, extra={"client": host})
            await trio.aclose_forcefully(stream)

    async def _serve_admitted(self, stream: trio.SocketStream) -> None:
        served: trio.abc.Stream = stream
        identity = None
        if self.ssl_context is not None:
            peer = _peer_name(stream)
            tls = await tls_handshake(stream, self.ssl_context, peer)
            if tls is None:
                return
            if self.ssl_principal is not None:
                identity = certificate_identity(tls, self.ssl_principal, peer)
                if identity is None:
                    await trio.aclose_forcefully(tls)
                    return
            served = tls
        connection = _Connection(self, served)
        connection.identity = identity
        self.connections.add(connection)
        log.debug("connection accepted", extra={"client": connection.peer})
        try:
            await connection.run()
        except Exception:  # one connection's failure must never take the server down
            log_failure(log, "connection from %s failed", connection.peer,
                        bug_level=logging.ERROR)
        finally:
            self.connections.discard(connection)


async def serve_kafka(
    broker: KafkaBroker,
    host: str | None,
    port: int,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    drain_timeout_s: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    sasl_mechanisms: tuple[str, ...] | None = None,
    ssl_principal: SslPrincipalMapper | None = None,
) -> None:
    """Serve Kafka clients on host:port until cancelled, then drain gracefully.

    `task_status.started(ListenAddress(host, port))` reports the bound address (port 0 picks a
    free port, which the broker then advertises if its configured advertised port is 0).
    `ssl_context` (server side) turns on TLS; `sasl_mechanisms` requires SASL authentication
    with one of those mechanisms (see the module docstring); `ssl_principal` (an SSL listener
    without SASL) names each client by its certificate, User:ANONYMOUS without one.
    """
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    broker.listener_bound(bound_port)
    server = _KafkaServer(
        broker, broker.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s,
        ssl_context=ssl_context, sasl_mechanisms=sasl_mechanisms, ssl_principal=ssl_principal,
    )
    async with trio.open_nursery() as nursery:
        try:  # from here on the listeners close however this ends (a cancelled start too)
            connections = await server.open_connections(nursery)
            log.info("kafka listener ready", extra={"address": f"{bound_host}:{bound_port}"})
            task_status.started(ListenAddress(bound_host, bound_port))
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(accept_forever, listener, connections,
                                         server.serve_connection, log)
        finally:
            server.begin_drain()
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()
