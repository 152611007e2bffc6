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

Graceful shutdown: when the server task is cancelled it stops accepting, stops reading new
requests, gives in-flight requests `drain_timeout_s` to finish and be written, then cancels
them.  The connections nursery is shielded so outside cancellation cannot cut that drain short;
its own deadline bounds it.

This module must never decode or encode Kafka messages itself, or touch partition data.
"""

from __future__ import annotations

import errno
import logging
from typing import Any, NamedTuple

import trio

from gateway.kafka_broker import CloseConnection, KafkaBroker
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import MalformedRequestError, UnsupportedVersionError
from protocols.kafka.framing import FrameReader

log = logging.getLogger("ledgerwire.kafka.listener")

RECEIVE_BYTES = 256 * 1024
# accept() failures that mean "out of resources right now", not "the listener is broken"
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_BACKOFF_S = 0.1


class ListenAddress(NamedTuple):
    host: str
    port: int


class _Reply:
    """The slot of one request in its connection's response order."""

    __slots__ = ("done", "frame", "close")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.frame: bytes | None = None
        self.close = False

    def finish(self, frame: bytes | None, *, close: bool = False) -> None:
        self.frame = frame
        self.close = close
        self.done.set()


def _peer_name(stream: trio.SocketStream) -> str:
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return "?"
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class _Connection:
    def __init__(self, server: _KafkaServer, stream: trio.SocketStream) -> None:
        self.server = server
        self.broker = server.broker
        self.stream = stream
        self.peer = _peer_name(stream)
        self.read_scope = trio.CancelScope()
        self.pending = 0

    def stop_reading(self) -> None:
        self.read_scope.cancel()

    async def run(self) -> None:
        config = self.broker.config
        send, receive = trio.open_memory_channel[_Reply](config.max_in_flight_per_connection)
        async with self.stream:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, receive, nursery.cancel_scope)
                async with send:
                    with self.read_scope:
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

    async def _read_loop(self, send: trio.MemorySendChannel[_Reply],
                         nursery: trio.Nursery) -> None:
        reader = FrameReader(self.broker.config.max_frame_bytes)
        ctx = self.broker.new_context(self.peer)
        idle_timeout = self.broker.config.idle_timeout_s
        while True:
            data = b""
            with trio.move_on_after(idle_timeout) as idle:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            if idle.cancelled_caught:
                if self.pending == 0:
                    log.info("closing idle connection", extra={"client": self.peer})
                    return
                continue
            if not data:
                return  # the client closed its side; pending answers still go out
            for frame in reader.feed(data):
                reply = _Reply()
                try:
                    header, body = self.broker.decode(frame)
                except UnsupportedVersionError as exc:
                    reply.finish(self.broker.answer_unsupported_version(exc))
                    await send.send(reply)
                    continue
                self.pending += 1
                await send.send(reply)
                # Taken in read order, right before the task starts (see request_order).
                request_ctx = self.broker.request_context(ctx, header)
                nursery.start_soon(self._serve_request, request_ctx, header, body, reply)

    async def _serve_request(self, ctx: Any, header: RequestHeader, body: dict,
                             reply: _Reply) -> None:
        try:
            frame = await self.broker.handle(ctx, header, body)
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

    async def _write_loop(self, receive: trio.MemoryReceiveChannel[_Reply],
                          connection_scope: trio.CancelScope) -> None:
        async with receive:
            async for reply in receive:
                await reply.done.wait()
                if reply.close:
                    connection_scope.cancel()
                    return
                if reply.frame is not None:
                    try:
                        with trio.move_on_after(self.broker.config.write_timeout_s) as stuck:
                            await self.stream.send_all(reply.frame)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        connection_scope.cancel()
                        return
                    if stuck.cancelled_caught:
                        log.warning("closing connection from %s: it stopped reading answers",
                                    self.peer, extra={"client": self.peer})
                        connection_scope.cancel()
                        return


class _KafkaServer:
    def __init__(self, broker: KafkaBroker, drain_timeout_s: float) -> None:
        self.broker = broker
        self.drain_timeout_s = drain_timeout_s
        self.connections: set[_Connection] = set()
        self._closing = trio.Event()

    async def run_connections(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Own the (shielded) connections nursery until a drain is asked for and completes."""
        async with trio.open_nursery() as connections:
            connections.cancel_scope.shield = True
            task_status.started(connections)
            await self._closing.wait()
            connections.cancel_scope.deadline = trio.current_time() + self.drain_timeout_s
            for connection in list(self.connections):
                connection.stop_reading()
        if connections.cancel_scope.cancelled_caught:
            log.warning("drain deadline passed; in-flight requests were cancelled")

    def begin_drain(self) -> None:
        self._closing.set()

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        connection = _Connection(self, stream)
        if self._closing.is_set():
            await stream.aclose()
            return
        self.connections.add(connection)
        log.debug("connection accepted", extra={"client": connection.peer})
        try:
            await connection.run()
        except Exception:  # one connection's failure must never take the server down
            log.exception("connection from %s failed", connection.peer,
                          extra={"client": connection.peer})
        finally:
            self.connections.discard(connection)

    async def accept_loop(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.error("accept failed, backing off", extra={"error": str(exc)})
                await trio.sleep(_ACCEPT_BACKOFF_S)
                continue
            connections.start_soon(self.serve_connection, stream)


async def serve_kafka(
    broker: KafkaBroker,
    host: str | None,
    port: int,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    drain_timeout_s: float | None = None,
) -> None:
    """Serve Kafka clients on host:port until cancelled, then drain gracefully.

    `task_status.started(ListenAddress(host, port))` reports the bound address (port 0 picks a
    free port, which the broker then advertises if its configured advertised port is 0).
    """
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    broker.listener_bound(bound_port)
    server = _KafkaServer(
        broker, broker.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
    )
    async with trio.open_nursery() as nursery:
        connections = await nursery.start(server.run_connections)
        try:
            log.info("kafka listener ready", extra={"address": f"{bound_host}:{bound_port}"})
            task_status.started(ListenAddress(bound_host, bound_port))
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(server.accept_loop, listener, connections)
        finally:
            server.begin_drain()
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()
