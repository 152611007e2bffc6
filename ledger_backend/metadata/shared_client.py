"""A metadata store session served by another local process ("shared:/path/to.sock").

The client of shared_server.py (its design notes say why a multi-process standalone shares its
store this way).  One object is one session = one unix-socket connection.  Requests carry ids
and may be in flight together; one background task reads answers and watch events, another
pings at a third of the session timeout.

Session states, as a ZooKeeper client reports them: CONNECTED while the connection stands.
When the connection breaks, the server has ended the session (its ephemeral nodes are gone),
so the state goes LOST at once: in-flight requests raise MetadataUnavailableError (they may or
may not have happened), watches raise SessionExpiredError, and the client connects again in
the background with a new session (CONNECTED again), as kazoo does after an expiry.  Callers
that must re-create ephemeral nodes watch session_events(), exactly as on ZooKeeper.

This module must never retry a write on its own (a retried create or CAS could apply twice),
and never block the Trio thread on the socket.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import trio

from .shared_wire import (
    PROTOCOL_VERSION,
    FrameBuffer,
    WireError,
    b64,
    encode_frame,
    error_from_wire,
    op_to_wire,
    results_from_wire,
    stat_from_wire,
    unb64,
)
from .store import (
    MetadataError,
    MetadataStore,
    MetadataUnavailableError,
    Op,
    OpResult,
    SessionBroadcaster,
    SessionExpiredError,
    SessionState,
    Stat,
    Watcher,
    WatchEvent,
    validate_path,
)

__all__ = ["SharedMetadataStore", "open_shared"]

log = logging.getLogger("ledgerwire.metadata.shared")

DEFAULT_SESSION_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
RECONNECT_DELAY_S = 0.2


class _Link:
    """One connection (= one server session)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = FrameBuffer()
        self.send_lock = trio.Lock()
        self.pending: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.broken = False


class SharedMetadataStore(MetadataStore):
    """One session on a metadata store served over a unix socket (see the module doc)."""

    def __init__(self, socket_path: str, session_timeout_s: float) -> None:
        self.socket_path = socket_path
        self.session_timeout_s = session_timeout_s
        self.session_id = 0
        self._link: _Link | None = None
        self._next_id = 0
        self._watchers: dict[int, Watcher] = {}
        self._sessions = SessionBroadcaster(SessionState.CONNECTED)
        self._closed = False
        self._connected = trio.Event()
        self._cancel = trio.CancelScope()
        self._stopped = trio.Event()

    # -- connection -------------------------------------------------------------------------

    async def _connect(self) -> _Link:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_unix_socket(self.socket_path)
        link = _Link(stream)
        try:
            answer = await self._exchange(link, {"op": "hello", "version": PROTOCOL_VERSION,
                                                 "timeout_ms": int(self.session_timeout_s
                                                                   * 1000)},
                                          read_inline=True)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        self.session_id = int(answer["session"])
        self.session_timeout_s = answer["timeout_ms"] / 1000.0
        return link

    async def _run(self, first: _Link) -> None:
        """Background: read, ping, and reconnect after a lost connection, until closed."""
        link: _Link | None = first
        with self._cancel:
            while not self._closed:
                if link is None:
                    try:
                        link = await self._connect()
                    except (OSError, trio.TooSlowError, MetadataError) as exc:
                        log.debug("metadata server not reachable: %r", exc)
                        await trio.sleep(RECONNECT_DELAY_S)
                        continue
                    self._link = link
                    self._sessions.publish(SessionState.CONNECTED)
                    log.info("metadata session re-established", extra={"session": self.session_id})
                self._link = link
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._pinger, link)
                        await self._reader(link)
                        nursery.cancel_scope.cancel()
                except Exception:  # never let a background failure take the process down
                    log.error("metadata connection task failed", exc_info=True)
                self._lose(link)
                link = None
                if not self._closed:
                    log.warning("metadata session lost: the connection to %s ended",
                                self.socket_path)
                    self._sessions.publish(SessionState.LOST)

    def _lose(self, link: _Link) -> None:
        link.broken = True
        if self._link is link:
            self._link = None
        for channel in link.pending.values():
            channel.close()
        link.pending.clear()
        error = SessionExpiredError("metadata session lost")
        for watcher in list(self._watchers.values()):
            watcher.fail(error)
        self._watchers.clear()
        trio.lowlevel.spawn_system_task(trio.aclose_forcefully, link.stream)

    async def _reader(self, link: _Link) -> None:
        try:
            while True:
                data = await link.stream.receive_some(65536)
                if not data:
                    return
                for message in link.buffer.feed(data):
                    self._dispatch(link, message)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, WireError) as exc:
            log.debug("metadata connection ended: %r", exc)

    def _dispatch(self, link: _Link, message: dict[str, Any]) -> None:
        wid = message.get("w")
        if wid is not None:
            watcher = self._watchers.get(wid)
            if watcher is None:
                return
            if message.get("end"):
                self._watchers.pop(wid, None)
                watcher.end()
            else:
                watcher.deliver(WatchEvent(str(message.get("path")), str(message.get("kind"))))
            return
        channel = link.pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if channel is not None:
            channel.send_nowait(message)

    async def _pinger(self, link: _Link) -> None:
        while True:
            await trio.sleep(self.session_timeout_s / 3)
            try:
                await self._exchange(link, {"op": "ping"})
            except MetadataError:
                return

    async def _exchange(self, link: _Link, request: dict[str, Any], *,
                        read_inline: bool = False) -> Any:
        """Send one request on link and wait for its answer."""
        if link.broken:
            raise MetadataUnavailableError("metadata connection lost")
        self._next_id += 1
        request_id = request["id"] = self._next_id
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        link.pending[request_id] = send
        try:
            async with link.send_lock:
                await link.stream.send_all(encode_frame(request))
            if read_inline:  # hello: the reader task does not run yet
                while request_id in link.pending:
                    data = await link.stream.receive_some(65536)
                    if not data:
                        raise MetadataUnavailableError("metadata server closed the connection")
                    for message in link.buffer.feed(data):
                        self._dispatch(link, message)
            try:
                answer = await receive.receive()
            except trio.EndOfChannel:
                raise MetadataUnavailableError("metadata connection lost") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise MetadataUnavailableError(f"metadata connection lost: {exc!r}") from None
        finally:
            link.pending.pop(request_id, None)
        if "err" in answer:
            raise error_from_wire(answer)
        return answer.get("ok")

    async def _call(self, request: dict[str, Any]) -> Any:
        if self._closed:
            raise MetadataError("metadata store is closed")
        link = self._link
        if link is None:
            raise MetadataUnavailableError("metadata server not connected")
        return await self._exchange(link, request)

    # -- MetadataStore ----------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        answer = await self._call({"op": "get", "path": path})
        return unb64(answer["data"]), stat_from_wire(answer["stat"])

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        answer = await self._call({"op": "exists", "path": path})
        return None if answer is None else stat_from_wire(answer)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        validate_path(path)
        return str(await self._call({"op": "create", "path": path, "data": b64(data),
                                     "ephemeral": ephemeral, "sequential": sequential,
                                     "make_parents": make_parents}))

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        validate_path(path)
        return stat_from_wire(await self._call({"op": "set", "path": path, "data": b64(data),
                                                "version": version}))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        await self._call({"op": "delete", "path": path, "version": version,
                          "recursive": recursive})

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        return [str(name) for name in await self._call({"op": "children", "path": path})]

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        wire = [op_to_wire(op) for op in ops]
        return results_from_wire(await self._call({"op": "multi", "ops": wire}))

    async def next_id(self, counter_path: str) -> int:
        validate_path(counter_path)
        return int(await self._call({"op": "next_id", "path": counter_path}))

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        holder: dict[str, int] = {}

        async def register(watcher: Watcher) -> None:
            self._next_id += 1
            wid = holder["wid"] = self._next_id
            self._watchers[wid] = watcher
            try:
                await self._call({"op": "watch", "wid": wid, "path": watcher.path,
                                  "children": watcher.children})
            except BaseException:
                self._watchers.pop(wid, None)
                raise

        def unregister(watcher: Watcher) -> None:
            wid = holder.pop("wid", None)
            if wid is None or self._watchers.pop(wid, None) is None:
                return
            link = self._link
            if link is not None and not link.broken and not self._closed:
                trio.lowlevel.spawn_system_task(self._unwatch, link, wid)

        return Watcher(path, children, register, unregister)

    async def _unwatch(self, link: _Link, wid: int) -> None:
        try:
            await self._exchange(link, {"op": "unwatch", "wid": wid})
        except MetadataError:
            pass  # the connection went: the server dropped the watch with it

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        return self._sessions.subscribe()

    async def close(self) -> None:
        if self._closed:
            return
        link = self._link
        self._closed = True  # from here the connection's end is no lost session
        with trio.CancelScope(shield=True):
            if link is not None and not link.broken:
                with trio.move_on_after(5):
                    try:
                        await self._exchange(link, {"op": "close"})
                    except MetadataError as exc:
                        log.debug("closing the metadata session: %r", exc)
            self._cancel.cancel()
            for watcher in list(self._watchers.values()):
                watcher.end()
            self._watchers.clear()
            self._sessions.close()
            if link is not None:
                await trio.aclose_forcefully(link.stream)
            await self._stopped.wait()


async def open_shared(socket_path: str,
                      session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> SharedMetadataStore:
    """A new session on the store served at socket_path (shared_server.py)."""
    if len(socket_path.encode()) >= 108:
        raise ValueError(f"metadata socket path too long: {socket_path!r}")
    store = SharedMetadataStore(socket_path, session_timeout_s)
    try:
        link = await store._connect()
    except OSError as exc:
        raise MetadataUnavailableError(f"cannot reach the metadata server at {socket_path}: "
                                       f"{exc}") from exc
    except trio.TooSlowError:
        raise MetadataUnavailableError(f"metadata server at {socket_path} did not answer") \
            from None
    store._link = link

    async def background() -> None:
        try:
            await store._run(link)
        finally:
            store._stopped.set()

    trio.lowlevel.spawn_system_task(background)
    return store
