"""RocketMQ TCP listeners: the name server and the broker.

Shape (Trio): one nursery per server; the accept loop hands each connection to a connections
nursery, where a `RemotingConnection` (remoting_connection.py: how a connection is read, its
requests served and its responses written, login first where the broker takes only signed
requests) serves it.

Graceful shutdown: when the server task is cancelled it stops accepting; each connection is
read until it falls idle (nothing in flight, no byte of a request buffered or unread, and
nothing received or answered for IDLE_QUIET_S), then closed: a RocketMQ client does not fail
a request whose connection closes but waits out its send timeout (the C++ client: 3 s), so a
request that reached the socket must be read and answered, never dropped by the close.  A
connection that never falls idle stops being read halfway through `drain_timeout_s`; requests
in flight get the rest of it to finish and be answered (a long-polling pull that is still
waiting then is cancelled).  The connections nursery is shielded so outside cancellation
cannot cut that drain short, its own deadline bounds it.  (A request the client writes in
the microseconds between the last idle check and the close is still lost to that close.)

This module must never decode message bodies or touch partition data itself.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

import trio

from gateway.listeners.accept_loop import accept_forever
from gateway.rocketmq.remoting_connection import (
    LoginGate,
    RemotingConnection,
    RequestHandler,
    StartRequest,
    login_gate,
    peer_address,
)
from gateway.rocketmq.service import RocketMQBroker
from gateway.security.connection_limits import ConnectionLimits, ConnectionRefused
from protocols.rocketmq.access import RocketMQGuard
from protocols.rocketmq.broker_api import BrokerLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.dispatch import RequestGuard, dispatch, start_request
from protocols.rocketmq.errors import RocketMQError
from protocols.rocketmq.login_gate import (
    DEFAULT_PRE_AUTH_MAX_FRAME_BYTES,
    DEFAULT_PRE_AUTH_TIMEOUT_S,
)
from protocols.rocketmq.name_server import NameServer

log = logging.getLogger("ledgerwire.rocketmq.listener")
acl_log = logging.getLogger("ledgerwire.rocketmq.acl")

DRAIN_TIMEOUT_S = 5.0
LISTEN_BACKLOG = 1024



async def serve_if_admitted(limits: ConnectionLimits | None, stream: trio.SocketStream,
                            serve: Callable[[trio.SocketStream], Awaitable[None]]) -> None:
    """Serve `stream` when `limits` admit its address (counted until it ends), else close it
    at once with one INFO line.  Shared by the 4.x and 5.x listeners."""
    if limits is None:
        await serve(stream)
        return
    host = peer_address(stream)[0]
    try:
        with limits.admitted(host):
            await serve(stream)
    except ConnectionRefused as exc:
        log.info("connection refused: %s", exc, extra={"client": host})
        await trio.aclose_forcefully(stream)


class ListenAddress(NamedTuple):
    host: str
    port: int


async def open_shared_listener(host: str, port: int) -> trio.SocketListener:
    """A listener on host:port with SO_REUSEPORT, so that another process of this user may
    bind the same address beside it (gateway/rocketmq/adoption.py); closed if binding fails."""
    family, kind, proto, _, address = (await trio.socket.getaddrinfo(
        host, port, type=trio.socket.SOCK_STREAM, flags=trio.socket.AI_PASSIVE))[0]
    sock = trio.socket.socket(family, kind, proto)
    try:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEPORT, 1)
        await sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


async def _serve_remoting(name: str, handle: RequestHandler, host: str | None, port: int,
                          *, max_frame_bytes: int, max_header_bytes: int,
                          drain_timeout_s: float = DRAIN_TIMEOUT_S,
                          on_bound: Callable[[int], None] | None = None,
                          on_close: Callable[[RemotingConnection], None] | None = None,
                          login: LoginGate | None = None,
                          connection_limits: ConnectionLimits | None = None,
                          reuse_port: bool = False,
                          start: StartRequest | None = None,
                          task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    listeners = ([await open_shared_listener(host or "0.0.0.0", port)] if reuse_port
                 else await trio.open_tcp_listeners(port, host=host or None))
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    if on_bound is not None:
        on_bound(bound_port)

    live: set[RemotingConnection] = set()
    closing = trio.Event()
    stop_reading_by = [math.inf]  # set when closing: half of the drain deadline

    async def serve_connection(stream: trio.SocketStream) -> None:
        await serve_if_admitted(connection_limits, stream, serve_admitted)

    async def serve_admitted(stream: trio.SocketStream) -> None:
        conn = RemotingConnection(stream, max_frame_bytes, max_header_bytes, login, start)
        live.add(conn)
        try:
            if closing.is_set():
                conn.stop_when_idle(stop_reading_by[0])
            await conn.run(handle)
        finally:
            live.discard(conn)
            conn.close()
            if on_close is not None:
                on_close(conn)

    ready: list[trio.Nursery] = []
    started = trio.Event()

    async def run_connections() -> None:
        """The connections nursery: shielded, so a shutdown drains it within its deadline.
        Started with start_soon, not nursery.start: a start cancelled before it reports
        would leave this task in trio's temporary nursery, its shielded wait never ending."""
        async with trio.open_nursery() as connections:
            connections.cancel_scope.shield = True
            ready.append(connections)
            started.set()
            await closing.wait()
            connections.cancel_scope.deadline = trio.current_time() + drain_timeout_s
            stop_reading_by[0] = trio.current_time() + drain_timeout_s / 2
            for conn in list(live):
                conn.stop_when_idle(stop_reading_by[0])

    async with trio.open_nursery() as outer:
        try:  # from here on the listeners close however this ends (a cancelled start too)
            outer.start_soon(run_connections)
            await started.wait()
            connections = ready[0]
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(accept_forever, listener, connections,
                                         serve_connection, log)
                log.info(f"rocketmq {name} ready",
                         extra={"address": f"{bound_host}:{bound_port}"})
                task_status.started(ListenAddress(bound_host, bound_port))
        finally:
            closing.set()
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()


async def serve_rocketmq_name_server(name_server: NameServer, host: str | None, port: int, *,
                                     max_frame_bytes: int = 4 << 20,
                                     guard: object = None,
                                     pre_auth_max_frame_bytes: int =
                                     DEFAULT_PRE_AUTH_MAX_FRAME_BYTES,
                                     pre_auth_timeout_s: float = DEFAULT_PRE_AUTH_TIMEOUT_S,
                                     connection_limits: ConnectionLimits | None = None,
                                     reuse_port: bool = False,
                                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the name server on host:port until cancelled; started(ListenAddress).  With
    `reuse_port` it is bound with SO_REUSEPORT (the workers of one node share it).  With a
    RocketMQGuard (a secured broker) each request's principal is established first (refused:
    NO_PERMISSION) and topics it may not describe are hidden; the plain ACL alone, like
    Apache 4.x's, checks nothing here."""

    async def handle(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        if not isinstance(guard, RocketMQGuard):
            return await name_server.handle(request)
        try:
            principal = guard.principal(conn, request)
        except RocketMQError as exc:
            acl_log.info("name server request refused", extra={
                "code": request.code, "client": f"{conn.peer[0]}:{conn.peer[1]}",
                "reason": str(exc)})
            return make_response(request, exc.code, str(exc))
        host = str(conn.peer[0])
        return await name_server.handle(
            request, lambda name: guard.may_describe_topic(principal, host, name))

    await _serve_remoting("name server", handle, host, port, max_frame_bytes=max_frame_bytes,
                          max_header_bytes=min(max_frame_bytes, 1 << 20),
                          login=login_gate(guard, pre_auth_max_frame_bytes, pre_auth_timeout_s),
                          connection_limits=connection_limits, reuse_port=reuse_port,
                          task_status=task_status)


class ServedBroker(BrokerLike, Protocol):
    """What a broker listener serves: standalone's RocketMQBroker, or one bundle's broker of
    a cluster (gateway/rocketmq/cluster.py), which answers on its own port."""

    def listener_bound(self, port: int) -> None: ...
    def connection_closed(self, conn: Any) -> None: ...


class RequestRouter(Protocol):
    """Sends a request elsewhere (gateway/rocketmq/forwarding.py): the answer, or None to
    serve it here."""

    async def route(self, conn: Any, request: RemotingCommand) -> RemotingCommand | None: ...


async def serve_rocketmq_broker(broker: RocketMQBroker | ServedBroker, host: str | None,
                                port: int, *, acl: RequestGuard | None = None,
                                router: RequestRouter | None = None,
                                pre_auth_max_frame_bytes: int = DEFAULT_PRE_AUTH_MAX_FRAME_BYTES,
                                pre_auth_timeout_s: float = DEFAULT_PRE_AUTH_TIMEOUT_S,
                                connection_limits: ConnectionLimits | None = None,
                                reuse_port: bool = False,
                                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the broker on host:port until cancelled; started(ListenAddress).  With
    advertised_port 0 the broker advertises the bound port.  With `acl`, every request is
    checked against it before dispatch; with `router`, a request it answers (a moved bundle's
    owner did) is not dispatched here.  With `reuse_port` the port is bound with SO_REUSEPORT
    (a cluster's bundle ports, which another broker may adopt)."""

    async def handle(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        if router is not None:
            answer = await router.route(conn, request)
            if answer is not None:
                return answer
        return await dispatch(broker, conn, request, acl)

    def start(conn: RemotingConnection, request: RemotingCommand,
              respond: Callable[[RemotingCommand | BaseException], None]) -> bool:
        return start_request(broker, conn, request, acl, respond)

    await _serve_remoting("broker", handle, host, port,
                          start=start if router is None else None,
                          max_frame_bytes=broker.config.max_frame_bytes,
                          max_header_bytes=broker.config.max_header_bytes,
                          on_bound=broker.listener_bound, on_close=broker.connection_closed,
                          login=login_gate(acl, pre_auth_max_frame_bytes, pre_auth_timeout_s),
                          connection_limits=connection_limits, reuse_port=reuse_port,
                          task_status=task_status)
