"""Serve one process's embedded metadata store to other local processes over a unix socket.

Design notes (issue 16: `ledgerwire standalone --workers N`).  Several broker processes on one
host need what cluster brokers get from ZooKeeper: compare-and-set, ephemeral nodes that vanish
with a dead process, and change notifications.  Two shapes were possible:

* every process opens the sqlite file itself (WAL mode lets them), plus a notification channel.
  But sqlite has no sessions: ephemeral nodes of a killed process would need a liveness scheme
  of their own (leases, pid checks), and watches would need polling or a side channel anyway;
  `BEGIN IMMEDIATE` across processes also serialises writers through file locks and fsyncs
  they cannot group.
* one process owns the database (as today: one flock, one connection) and serves it.  A
  session is a connection: when a worker dies, the kernel closes its socket at once and the
  server drops the session's ephemeral nodes in the same instant, so failover takes
  milliseconds, not a ZooKeeper session timeout.  Watches are pushed on the same connection.
  CAS stays what it is: one sqlite transaction in the owning process.

We chose the second: the supervisor of `standalone --workers N` serves; this module is that
server, shared_client.py the client (`open_store("shared:/path/to.sock")`).  The supervisor's
own session and every served session share one in-process tree (embedded.py), so they see
each other's nodes and events exactly as in-process sessions do.

Sessions also expire like ZooKeeper's when the client is silent for its session timeout (the
client pings at a third of it): a paused (SIGSTOPped) worker loses its ephemeral nodes and its
bundles move, and the ownership lease (gateway/cluster/ownership.py) keeps its meaning.
Requests of one connection are applied in the order sent (one task reads and executes them),
as ZooKeeper orders one client's operations.  Only processes of the same user may connect
(SO_PEERCRED), and the socket file is mode 0600 in the private data directory.

This module must never hold a session open after its connection ended, and never let one
client's bad frame or failing request disturb other clients (it closes that connection only).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .shared_wire import (
    PROTOCOL_VERSION,
    FrameBuffer,
    WireError,
    b64,
    encode_frame,
    error_to_wire,
    int_arg,
    op_from_wire,
    results_to_wire,
    stat_to_wire,
    str_arg,
    unb64,
)
from .store import MetadataError, MetadataStore

__all__ = ["serve_shared_store"]

log = logging.getLogger("ledgerwire.metadata.shared")

MIN_SESSION_TIMEOUT_S = 1.0
MAX_SESSION_TIMEOUT_S = 60.0
HELLO_TIMEOUT_S = 10.0

SessionOpener = Callable[[], Awaitable[MetadataStore]]


async def serve_shared_store(open_session: SessionOpener, socket_path: str, *,
                             task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Listen on socket_path and serve each connection as one session of open_session()."""
    try:
        os.unlink(socket_path)  # a stale socket of a killed server (the store's flock is ours)
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)
        try:
            await sock.bind(socket_path)
        finally:
            os.umask(old_umask)
        os.chmod(socket_path, 0o600)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    listener = trio.SocketListener(sock)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started(socket_path)
            await trio.serve_listeners(partial_handler(open_session), [listener],
                                       handler_nursery=nursery)
    finally:
        try:
            os.unlink(socket_path)
        except OSError:
            pass


def partial_handler(open_session: SessionOpener) -> Callable[[trio.SocketStream],
                                                            Awaitable[None]]:
    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _Connection(stream, open_session).run()
        except Exception as exc:  # one connection's failure must never stop the server
            if not _only_connection_errors(exc):
                log.error("metadata connection failed", exc_info=True)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
    return handle


_CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError)


def _only_connection_errors(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_connection_errors(e) for e in exc.exceptions)
    return isinstance(exc, _CONNECTION_ERRORS)


def _peer_uid(stream: trio.SocketStream) -> int | None:
    try:
        raw = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                       struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return int(struct.unpack("3i", raw)[1])


class _Connection:
    """One client connection: one session, its watches, its request loop."""

    def __init__(self, stream: trio.SocketStream, open_session: SessionOpener) -> None:
        self.stream = stream
        self.open_session = open_session
        self.session: MetadataStore | None = None
        self.buffer = FrameBuffer()
        self.out_send, self.out_receive = trio.open_memory_channel[bytes](math.inf)
        self.watches: dict[int, trio.CancelScope] = {}
        self.timeout_s = 10.0
        self.closing = False

    async def run(self) -> None:
        uid = _peer_uid(self.stream)
        if uid is not None and uid != os.getuid():
            log.warning("metadata socket: refused a connection from uid %d", uid)
            return
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._writer)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            if self.session is not None:
                with trio.CancelScope(shield=True):
                    try:
                        await self.session.close()  # its ephemeral nodes go now
                    except MetadataError as exc:
                        log.warning("closing a served metadata session failed: %r", exc)

    async def _writer(self) -> None:
        try:
            async for frame in self.out_receive:
                await self.stream.send_all(frame)
        except _CONNECTION_ERRORS:
            self.nursery.cancel_scope.cancel()  # the reader ends with it: the session goes

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.out_send.send_nowait(encode_frame(message))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _read_loop(self) -> None:
        timeout = HELLO_TIMEOUT_S
        while not self.closing:
            data = b""
            with trio.move_on_after(timeout) as scope:
                try:
                    data = await self.stream.receive_some(65536)
                except _CONNECTION_ERRORS:
                    return  # reset by a dying client: the session ends with it
            if scope.cancelled_caught:
                if self.session is not None:
                    log.warning("metadata session %s expired: its client was silent %.1f s",
                                getattr(self.session, "session_id", "?"), timeout)
                return
            if not data:
                return  # the client closed or died: the session ends with it
            try:
                frames = self.buffer.feed(data)
                for message in frames:
                    await self._handle(message)
                    if self.closing:
                        break
            except WireError as exc:
                log.warning("metadata socket: closing a connection that broke the protocol: %s",
                            exc)
                return
            timeout = self.timeout_s if self.session is not None else HELLO_TIMEOUT_S

    async def _handle(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        op = message.get("op")
        if self.session is None:
            if op != "hello":
                raise WireError("the first request must be hello")
            if message.get("version") != PROTOCOL_VERSION:
                raise WireError(f"unsupported protocol version {message.get('version')!r}")
            wanted = int_arg(message, "timeout_ms", 10_000) / 1000.0
            self.timeout_s = min(MAX_SESSION_TIMEOUT_S, max(MIN_SESSION_TIMEOUT_S, wanted))
            self.session = await self.open_session()
            self.send({"id": request_id, "ok": {
                "session": getattr(self.session, "session_id", 0),
                "timeout_ms": int(self.timeout_s * 1000)}})
            return
        try:
            result = await self._execute(op, message)
        except WireError:
            raise
        except (MetadataError, ValueError) as exc:
            self.send(error_to_wire(request_id, exc))
            return
        except Exception as exc:  # a bug must cost this request, not the server
            log.error("metadata request %r failed", op, exc_info=True)
            self.send(error_to_wire(request_id, MetadataError(f"server error: {exc!r}")))
            return
        self.send({"id": request_id, "ok": result})

    async def _execute(self, op: Any, m: dict[str, Any]) -> Any:
        s = self.session
        assert s is not None
        if op == "ping":
            return None
        if op == "get":
            data, stat = await s.get(str_arg(m, "path"))
            return {"data": b64(data), "stat": stat_to_wire(stat)}
        if op == "exists":
            found = await s.exists(str_arg(m, "path"))
            return None if found is None else stat_to_wire(found)
        if op == "create":
            return await s.create(str_arg(m, "path"), unb64(m.get("data", "")),
                                  ephemeral=bool(m.get("ephemeral")),
                                  sequential=bool(m.get("sequential")),
                                  make_parents=bool(m.get("make_parents")))
        if op == "set":
            stat = await s.set(str_arg(m, "path"), unb64(m.get("data", "")),
                               int_arg(m, "version", -1))
            return stat_to_wire(stat)
        if op == "delete":
            await s.delete(str_arg(m, "path"), int_arg(m, "version", -1),
                           recursive=bool(m.get("recursive")))
            return None
        if op == "children":
            return await s.children(str_arg(m, "path"))
        if op == "multi":
            ops = m.get("ops")
            if not isinstance(ops, list):
                raise WireError("multi needs a list of ops")
            return results_to_wire(await s.multi([op_from_wire(o) for o in ops]))
        if op == "next_id":
            return await s.next_id(str_arg(m, "path"))
        if op == "watch":
            wid = int_arg(m, "wid")
            if wid in self.watches:
                raise WireError(f"watch id {wid} is in use")
            await self.nursery.start(self._forward_watch, wid, str_arg(m, "path"),
                                     bool(m.get("children")))
            return None
        if op == "unwatch":
            scope = self.watches.pop(int_arg(m, "wid"), None)
            if scope is not None:
                scope.cancel()
            return None
        if op == "close":
            self.closing = True
            self.session = None
            await s.close()
            return None
        raise WireError(f"unknown metadata request {op!r}")

    async def _forward_watch(self, wid: int, path: str, children: bool, *,
                             task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self.session is not None
        scope = trio.CancelScope()
        with scope:
            async with self.session.watch(path, children=children) as watcher:
                self.watches[wid] = scope
                task_status.started()
                async for event in watcher:
                    self.send({"w": wid, "path": event.path, "kind": event.kind})
            self.send({"w": wid, "end": True})  # the store closed under the watch
        self.watches.pop(wid, None)
