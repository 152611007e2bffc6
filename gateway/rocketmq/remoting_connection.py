"""One RocketMQ remoting connection (`RemotingConnection`, the ConnectionLike the handlers
see): how it is read, how its requests are served and how its responses are written.  The
servers that accept such connections and drain them on shutdown live in listener.py.

Reading: one task per connection reads frames (`FrameReader` refuses an oversize length before
reading the body) and hands each request to a task of its own: a task that answered one
request parks and takes the next (no task is created per request; as many exist as requests
were ever in flight at once, at most MAX_IDLE_SERVERS of them parked).  A send the broker can
answer from its append's completion is started without a task (`StartRequest`,
protocols/rocketmq/dispatch.py start_request) and answered from that completion.

Writing: RocketMQ clients match responses by opaque, so responses go out in completion order (a
long-polling pull must not hold up a send).  Whoever writes a frame holds the connection's
write gate (write_gate.py), so frames never interleave: a request's task writes its response
itself when the socket is idle (no hand-over to another task, and no scheduler turn when the
socket takes it at once), else queues it for the connection's writer task.  Oneway requests
are run and never answered.  Broker-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE) go through the writer task.  A frame that cannot be decoded closes
that connection only; a handler that fails unexpectedly gets a SYSTEM_ERROR response (and a
log line), never a crash.

Before login (a broker that takes only signed requests): a new connection is read header
first, one request at a time (protocols/rocketmq/login_gate.py), until one request is
authenticated; a header that names no account is refused and its body dropped unread, a
frame over `pre_auth_max_frame_bytes` closes the connection unread, and a connection that has
not proved itself within `pre_auth_timeout_s` is closed.  Then it is read as above.

Drain (`stop_when_idle`): the connection is read until it falls idle (nothing in flight, no
byte of a request buffered or unread, and nothing received or answered for IDLE_QUIET_S), at
the latest until the time it is given; the requests in flight are answered before it closes.

This module must never decode message bodies or touch partition data itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import logging
import math
import os
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio

from gateway.rocketmq.write_gate import WriteGate
from ledger_backend.parked_tasks import ParkedTasks
from protocols.rocketmq.access import RocketMQGuard
from protocols.rocketmq.codec import (
    FrameReader,
    RemotingCommand,
    decode_command,
    encode_command,
    make_response,
)
from protocols.rocketmq.errors import MalformedFrameError, ResponseCode, RocketMQError
from protocols.rocketmq.login_gate import (
    DEFAULT_PRE_AUTH_MAX_FRAME_BYTES,
    DEFAULT_PRE_AUTH_TIMEOUT_S,
    FrameArrived,
    HeaderArrived,
    PreAuthReader,
)

# the listener's loggers, as before these pieces moved here (log filters and tests name them)
log = logging.getLogger("ledgerwire.rocketmq.listener")
acl_log = logging.getLogger("ledgerwire.rocketmq.acl")

# Below glibc's mmap threshold (128 KiB): socket.recv(n) allocates n bytes first, and at 128 KiB
# or more every call pays an mmap + munmap (~4 us, as much as the rest of a small read).
RECEIVE_BYTES = 64 * 1024
MAX_IN_FLIGHT_PER_CONNECTION = 1024
MAX_IDLE_SERVERS = 16  # parked request tasks a connection keeps for its next requests
IDLE_QUIET_S = 0.02  # a synchronous client's next request on the connection comes sooner
IDLE_POLL_S = 0.005
_connection_ids = itertools.count(1)

RequestHandler = Callable[["RemotingConnection", RemotingCommand],
                          Awaitable[RemotingCommand | None]]
# starts answering a request without a task of its own: False when it did not (dispatch.py)
StartRequest = Callable[["RemotingConnection", RemotingCommand,
                         Callable[[RemotingCommand | BaseException], None]], bool]


class LoginGate(NamedTuple):
    """How a connection that has not been authenticated yet is read (see the module doc)."""

    guard: RocketMQGuard
    max_frame_bytes: int = DEFAULT_PRE_AUTH_MAX_FRAME_BYTES
    timeout_s: float = DEFAULT_PRE_AUTH_TIMEOUT_S


def login_gate(guard: object, max_frame_bytes: int, timeout_s: float) -> LoginGate | None:
    """A gate when `guard` takes only signed requests, else None (no login to wait for)."""
    if isinstance(guard, RocketMQGuard) and guard.requires_login:
        return LoginGate(guard, max_frame_bytes, timeout_s)
    return None


def _unread_bytes(stream: trio.SocketStream) -> int:
    """Bytes the kernel received on the socket that nobody has read yet (-1: unknown)."""
    try:
        answer = fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return -1
    return int(struct.unpack("i", answer)[0])


def peer_address(stream: trio.SocketStream) -> tuple[str, int]:
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return ("0.0.0.0", 0)
    return (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else ("0.0.0.0", 0)


class RemotingConnection:
    """One client connection (the ConnectionLike the handlers see)."""

    def __init__(self, stream: trio.SocketStream, max_frame_bytes: int,
                 max_header_bytes: int, login: LoginGate | None = None,
                 start: StartRequest | None = None) -> None:
        self.stream = stream
        self.login = login
        self.peer = peer_address(stream)
        self.connection_id = next(_connection_ids)
        self.max_frame_bytes = max_frame_bytes
        self.max_header_bytes = max_header_bytes
        self._send, self._receive = trio.open_memory_channel[bytes](math.inf)
        self._slots = trio.Semaphore(MAX_IN_FLIGHT_PER_CONNECTION)
        self._read_scope = trio.CancelScope()
        self._write_gate = WriteGate()  # whoever writes a frame holds it: frames never interleave
        self._start = start  # answers a request without a task where it can (start_request)
        self._started = 0  # requests it started that are not answered yet
        # made when the connection's end waits for them, set when that count falls to 0
        self._started_answered: trio.Event | None = None
        self._nursery: trio.Nursery | None = None  # the connection's: writes a response's rest
        self._connection_scope = trio.CancelScope()
        self._reader: FrameReader | None = None
        # time.monotonic(), not trio.current_time(): stamped twice per request, and only ever
        # compared with itself (three Python calls each through Trio's clock, one C call here)
        self._last_activity = time.monotonic()
        self._closing = trio.Event()
        self._stop_reading_by = math.inf
        self._idle_servers: ParkedTasks[RemotingCommand | None] = ParkedTasks()
        self._reading = True  # False once no request is read any more: nobody parks then

    def stop_reading(self) -> None:
        """Take no new requests; the ones in flight finish and are answered (graceful drain)."""
        self._read_scope.cancel()

    def stop_when_idle(self, by: float) -> None:
        """Graceful drain: stop reading at the first idle moment (see the module docstring),
        at the latest at trio time `by`."""
        self._stop_reading_by = by
        self._closing.set()

    def _idle(self) -> bool:
        if self._slots.value < MAX_IN_FLIGHT_PER_CONNECTION:
            return False  # a request is being served
        if self._reader is not None and self._reader.buffered:
            return False  # part of a request was read
        if time.monotonic() - self._last_activity < IDLE_QUIET_S:
            return False
        return _unread_bytes(self.stream) == 0

    async def _stop_reading_when_idle(self) -> None:
        await self._closing.wait()
        while True:  # polled: the kernel's receive queue has no event to wait for
            if self._idle() or trio.current_time() >= self._stop_reading_by:
                break
            await trio.sleep(IDLE_POLL_S)
        self._read_scope.cancel()

    def send_request(self, command: RemotingCommand) -> bool:
        try:
            self._send.send_nowait(encode_command(command))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        return True

    async def run(self, handle: RequestHandler) -> None:
        async with self.stream, trio.open_nursery() as nursery:
            self._connection_scope = nursery.cancel_scope
            self._nursery = nursery
            nursery.start_soon(self._write_loop, nursery.cancel_scope)
            nursery.start_soon(self._stop_reading_when_idle)
            async with trio.open_nursery() as requests:
                with self._read_scope:
                    try:
                        read: bytes | None = b""
                        if self.login is not None:
                            read = await self._login(self.login, handle, requests)
                        if read is None:
                            nursery.cancel_scope.cancel()  # refused or gone before login
                        else:
                            await self._read_loop(handle, requests, read)
                    except MalformedFrameError as exc:
                        log.warning("closing connection after a malformed frame",
                                    extra={"client": f"{self.peer[0]}:{self.peer[1]}",
                                           "error": str(exc)})
                        nursery.cancel_scope.cancel()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        nursery.cancel_scope.cancel()
                    finally:
                        self._stop_parking()
            while self._started:  # requests answered without a task: answered too
                self._started_answered = trio.Event()
                await self._started_answered.wait()
            # every request is answered (or the connection is gone): flush, then close
            self._send.close()

    async def _login(self, gate: LoginGate, handle: RequestHandler, nursery: trio.Nursery
                     ) -> bytes | None:  # fmt: skip
        """Read requests one at a time, header first, until one is authenticated: start
        serving it and return the bytes read past it; None when the connection is to close
        (timed out, or closed by the client).  A refused request is answered NO_PERMISSION
        (its body dropped unread when the header already shows it) and the next one read
        the same way."""
        reader = PreAuthReader(min(gate.max_frame_bytes, self.max_frame_bytes))
        client = f"{self.peer[0]}:{self.peer[1]}"
        with trio.move_on_after(gate.timeout_s):
            while True:
                event = reader.next_event()
                if event is None:
                    data = await self.stream.receive_some(min(RECEIVE_BYTES, reader.wanted))
                    if not data:
                        return None
                    reader.feed(data)
                    continue
                try:
                    if isinstance(event, HeaderArrived):
                        gate.guard.refuse_header(self, event.command)
                        continue
                    assert isinstance(event, FrameArrived)
                    request = event.command
                    if request.is_response:
                        continue
                    gate.guard.principal(self, request)
                except RocketMQError as exc:
                    acl_log.info("request refused before login", extra={
                        "client": client, "code": event.command.code, "reason": str(exc)})
                    if isinstance(event, HeaderArrived):
                        reader.skip_body()
                    if not event.command.is_oneway and not event.command.is_response:
                        await self._respond(encode_command(
                            make_response(event.command, exc.code, str(exc))))
                    continue  # still not logged in: the next request is read the same way
                await self._slots.acquire()
                nursery.start_soon(self._serve, handle, request)
                return reader.rest()
        acl_log.warning("closing a connection that did not authenticate in time",
                        extra={"client": client, "timeout_s": gate.timeout_s})
        return None

    async def _read_loop(self, handle: RequestHandler, nursery: trio.Nursery,
                         already_read: bytes = b"") -> None:
        reader = self._reader = FrameReader(self.max_frame_bytes)
        data = already_read
        while True:
            if not data:
                data = await self._receive_some()
                self._last_activity = time.monotonic()
                if not data:
                    return
            frames, data = reader.feed(data), b""
            for frame in frames:
                command = decode_command(frame, max_header_bytes=self.max_header_bytes)
                if command.is_response:
                    continue  # answers to our oneway notifications: nothing waits for them
                try:
                    self._slots.acquire_nowait()  # no scheduler round trip per request
                except trio.WouldBlock:
                    await self._slots.acquire()
                if self._start is not None and self._start_at_once(command):
                    continue  # answered from the append's completion: no task, no step
                if not self._idle_servers.hand(command):  # else none parked: a task of its own
                    nursery.start_soon(self._serve_requests, handle, command)

    async def _receive_some(self) -> bytes:
        """What `self.stream.receive_some(RECEIVE_BYTES)` returns, with the same checkpoints
        (a cancelled reader reads nothing; a read that succeeds at once still yields once),
        reading the socket directly: Trio's stream and socket wrappers cost ~12 Python calls
        (two context managers among them) on every request.  b"" at end of stream; a reset or
        closed socket is BrokenResourceError / ClosedResourceError, as from the stream."""
        sock = self.stream.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = self._read_now(sock)
        except BlockingIOError:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                return self._read_now(sock)
            except BlockingIOError:
                pass

    @staticmethod
    def _read_now(sock: trio.socket.SocketType) -> bytes:
        fd = sock.fileno()  # -1 once closed: never a number reused since
        if fd < 0:
            raise trio.ClosedResourceError("connection closed")
        try:
            return os.read(fd, RECEIVE_BYTES)
        except BlockingIOError:
            raise
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket read failed: {exc!r}") from exc

    async def _serve_requests(self, handle: RequestHandler, request: RemotingCommand | None
                              ) -> None:  # fmt: skip
        """Serve `request`, then park until the read loop hands over the next one (None: the
        connection reads no more)."""
        while request is not None:
            await self._serve(handle, request)
            request = None  # a parked task holds nothing of its last request
            if not self._reading or len(self._idle_servers) >= MAX_IDLE_SERVERS:
                return
            request = await self._idle_servers.park()  # the next request, None at the end

    def _stop_parking(self) -> None:
        """No request is read any more: the parked tasks end, and no task parks again."""
        self._reading = False
        self._idle_servers.hand_all(None)

    async def _serve(self, handle: RequestHandler, request: RemotingCommand) -> None:
        try:
            try:
                response = await handle(self, request)
            except Exception as exc:
                response = _failed(request, exc)
            if response is not None and not request.is_oneway:
                await self._respond(encode_command(response))
        finally:
            self._last_activity = time.monotonic()
            self._slots.release()

    def _start_at_once(self, request: RemotingCommand) -> bool:
        """Have `self._start` answer `request` from its append's completion (no task)."""
        assert self._start is not None
        self._started += 1
        try:
            if self._start(self, request, functools.partial(self._answer_now, request)):
                return True
        except Exception:  # a bug before anything started: not the read loop's end (nor the
            # listener's); the task path answers it, SYSTEM_ERROR if the bug is there too
            log.exception("starting a request failed", extra={"code": request.code})
        self._started -= 1
        return False

    def _answer_now(self, request: RemotingCommand, result: RemotingCommand | BaseException
                    ) -> None:  # fmt: skip
        """A started request's answer (in whatever task completed it): write it now."""
        try:
            response = _failed(request, result) if isinstance(result, BaseException) else result
            if not request.is_oneway:
                self._respond_now(encode_command(response))
        finally:
            self._last_activity = time.monotonic()
            self._slots.release()
            self._started -= 1
            if not self._started and self._started_answered is not None:
                self._started_answered.set()

    def _respond_now(self, frame: bytes) -> None:
        """_respond without waiting: what the socket does not take at once is sent by a task
        of the connection, which holds the write gate until then."""
        rest = self._write_now(frame)
        if rest is None:
            return
        if self._nursery is not None:
            try:
                self._nursery.start_soon(self._send_rest, rest)
                return  # it gives the gate back
            except RuntimeError:  # the connection is closing: nobody reads the rest
                pass
        self._write_gate.give_back()

    async def _respond(self, frame: bytes) -> None:
        """Write a response from the serving task when the socket is idle (no hand-over to the
        writer task); otherwise queue it for the writer."""
        rest = self._write_now(frame)
        if rest is not None:
            await self._send_rest(rest)

    def _write_now(self, frame: bytes) -> memoryview | None:
        """Write `frame` now if the write gate is free, else queue it for the writer task: None
        when that is all; else what the socket did not take, the gate still held for it."""
        if not self._write_gate.take_now():
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                self._send.send_nowait(frame)
            return None
        try:
            sent = self._write_at_once(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._connection_scope.cancel()
            sent = len(frame)
        if sent < len(frame):
            return memoryview(frame)[sent:]
        self._write_gate.give_back()
        return None

    async def _send_rest(self, rest: memoryview) -> None:
        """Send what the socket did not take at once, then give the write gate back."""
        try:
            await self.stream.send_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._connection_scope.cancel()
        finally:
            self._write_gate.give_back()

    def _write_at_once(self, frame: bytes) -> int:
        """Bytes of `frame` the socket takes now, without yielding (the caller holds the write
        gate).  Trio's send_all yields to the scheduler after a send that succeeded at once: one
        more event-loop turn per response, which a lone request pays in full.  What the socket
        does not take now is left to send_all; a reset or closed socket is BrokenResourceError."""
        fd = self.stream.socket.fileno()  # -1 once closed: never a number reused since
        if fd < 0:
            raise trio.ClosedResourceError("connection closed")
        try:
            return os.write(fd, frame)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket write failed: {exc!r}") from exc

    async def _write_loop(self, connection_scope: trio.CancelScope) -> None:
        async with self._receive:
            async for frame in self._receive:
                await self._write_gate.take()
                try:
                    await self.stream.send_all(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    connection_scope.cancel()
                    return
                finally:
                    self._write_gate.give_back()
        connection_scope.cancel()

    def close(self) -> None:
        self._send.close()


def _failed(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """SYSTEM_ERROR for a request whose handler failed unexpectedly (logged, with the traceback)."""
    log.error("request failed", extra={"code": request.code}, exc_info=exc)
    return make_response(request, ResponseCode.SYSTEM_ERROR,
                         f"internal error: {type(exc).__name__}: {exc}")
