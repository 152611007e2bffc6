"""Connections from a ledger client to bookies: one pipelined TCP connection per bookie.

`BookieConnection.submit()` is synchronous: it assigns a request id, queues the encoded frame and
registers a callback, so a writer can send an entry to its write set without yielding (entry ids
stay in call order); a lone request on an idle connected socket is written by `submit` itself
(non-blocking, the rest left to the writer). One task per connection connects (with a timeout),
writes queued frames in batches, reads responses and hands each to its request's callback;
every request carries a deadline and a sweeper fails expired ones with BKTimeoutError. With a
bookie secret and/or an SSL context each new connection first runs the TLS and AUTH handshakes
(bookie_connect.py); a bookie that refuses them fails the requests with BookieUnavailableError.
Past TLS, `submit` never writes to the socket itself.
When the connection breaks, every request in flight fails with BookieUnavailableError and the next
request reconnects; a connection without credentials that a bookie answered UNAUTHORIZED (it
refuses unauthenticated clients and closes) fails the rest of its requests with that refusal.

In-process bookies (LocalBookieConnection) get the request objects without the wire, and plain
range reads in one storage call (`read_entries`), falling back to single requests on any doubt.
Their requests are answered by parked worker tasks that `submit` hands each request to, not by
a task spawned per request (spawning one cost about as much as the rest of the hand-over).
An add the bookie can take at once (`start_add`: its ledger's key known, room in the write
cache) needs no worker at all: its answer comes from the journal's completion of its group.

Callbacks run inside the connection's tasks: they must be quick and must never block or await.
This module must never interpret entries or ledger state: it moves protocol messages only.
A client's pool of these connections, one per bookie, is bookie_pool.py's.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import trio

from ledger_backend.bookie import local_bookies
from ledger_backend.bookie.auth import BookieCredential
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    AddEntryRequest,
    ProtocolError,
    Request,
    Response,
    Status,
    encode,
)
from ledger_backend.client.bookie_connect import open_bookie_stream
from ledger_backend.client.errors import (
    BKTimeoutError,
    BookieRequestError,
    BookieUnavailableError,
    LedgerError,
)
from ledger_backend.parked_tasks import ParkedTasks

log = logging.getLogger(__name__)

ResponseCallback = Callable[[Response | LedgerError], None]
_SEND_BATCH_BYTES = 1 << 20
_RECEIVE_BYTES = 64 * 1024  # below glibc's mmap threshold: recv(n) allocates n bytes first
_MAX_RECEIVE_BYTES = 8 << 20
_SWEEP_INTERVAL_S = 0.05
_MAX_IDLE_LOCAL_WORKERS = 64  # parked workers of one in-process connection; beyond: they end

_LocalJob = tuple[local_bookies.AnswersRequests, Request, int]  # server, request, request id


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bookie address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


def _deliver(callback: ResponseCallback, outcome: Response | LedgerError) -> None:
    """Run a callback; a bug in one must not take down the connection and its other requests."""
    try:
        callback(outcome)
    except Exception:
        log.exception("ledger client callback failed for %r", outcome)


async def _request(
    conn: BookieConnection | LocalBookieConnection,
    build: Callable[[int], Request],
    timeout_s: float | None,
) -> Response:
    done = trio.Event()
    result: list[Response | LedgerError] = []

    def on_done(outcome: Response | LedgerError) -> None:
        result.append(outcome)
        done.set()

    conn.submit(build, on_done, timeout_s)
    await done.wait()  # the connection's sweeper bounds this wait with the request's deadline
    outcome = result[0]
    if isinstance(outcome, LedgerError):
        raise outcome
    return outcome


@dataclass(slots=True)
class _InFlight:
    deadline: float
    callback: ResponseCallback


class BookieConnection:
    """A pipelined connection to one bookie, (re)connected on demand."""

    def __init__(
        self,
        address: str,
        nursery: trio.Nursery,
        *,
        timeout_s: float,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        secret: BookieCredential | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._secret = secret
        self._ssl_context = ssl_context
        self._host, self._port = parse_address(address)
        self._nursery = nursery
        self._timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._ids = itertools.count(1)
        self._in_flight: dict[int, _InFlight] = {}
        self._outgoing: list[bytes] = []
        self._work = trio.Event()
        self._requests_waiting = trio.Event()
        self._running = False
        self._closed = False
        self._cancel_scope: trio.CancelScope | None = None
        self._fd = -1  # the connected socket's descriptor while `submit` may write to it
        self._sending = False  # the writer task holds frames not yet fully sent
        # an unauthenticated connection's refusal: what its other requests fail with
        self._refusal: LedgerError | None = None
        # batch reads (client/batch_reads.py): False once this bookie is known not to serve them
        self.batch_reads = True
        self.batch_answers = 0
        self.batch_losses = 0  # connections lost under batch reads before any batch answer

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def submit(
        self, build: Callable[[int], Request], callback: ResponseCallback,
        timeout_s: float | None = None,
    ) -> None:  # fmt: skip
        """Queue `build(request_id)`; `callback` gets the response or a LedgerError, once."""
        if self._closed:
            _deliver(callback, BookieUnavailableError(f"connection to {self.address} is closed"))
            return
        request_id = next(self._ids)
        frame = encode(build(request_id))
        wait = self._timeout_s if timeout_s is None else timeout_s
        self._in_flight[request_id] = _InFlight(trio.current_time() + wait, callback)
        self._requests_waiting.set()
        if (len(self._in_flight) == 1 and self._fd >= 0 and not self._sending
                and not self._outgoing):  # fmt: skip
            # A lone request on an idle, connected socket: write it now rather than wake the
            # writer task (three task steps) for a batch of one.  Whatever the socket does not
            # take (or an error) goes to the writer, which sends it or reports the failure.
            try:
                sent = os.write(self._fd, frame)
            except OSError:  # BlockingIOError included
                sent = 0
            if sent == len(frame):
                return
            frame = frame[sent:]
        self._outgoing.append(frame)
        self._work.set()
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._run)

    async def request(self, build: Callable[[int], Request], timeout_s: float | None = None
                      ) -> Response:  # fmt: skip
        """Send one request and wait for its response (or raise the LedgerError)."""
        return await _request(self, build, timeout_s)

    async def close(self) -> None:
        self._closed = True
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()
        self._fail_all(BookieUnavailableError(f"connection to {self.address} closed"))
        await trio.lowlevel.checkpoint()

    # --- connection task -----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            with trio.CancelScope() as scope:
                self._cancel_scope = scope
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._sweep_expired)
                    await self._connect_loop()
                    nursery.cancel_scope.cancel()
        finally:
            self._running = False
            self._cancel_scope = None
            self._fail_all(BookieUnavailableError(f"connection to {self.address} stopped"))

    async def _connect_loop(self) -> None:
        while not self._closed and self._in_flight:
            try:
                stream, decoder = await open_bookie_stream(
                    self.address, self._host, self._port, timeout_s=self._timeout_s,
                    max_frame_bytes=self._max_frame_bytes, ssl_context=self._ssl_context,
                    secret=self._secret)  # fmt: skip
            except BookieUnavailableError as exc:
                self._fail_all(exc)
                return
            self._refusal = None
            # each task handles its own I/O errors (a nursery would wrap them in a group)
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, stream, nursery.cancel_scope)
                try:
                    await self._read_loop(stream, decoder)
                finally:
                    self._fd = -1  # before the socket closes: its number may be reused
                nursery.cancel_scope.cancel()
            # Requests pipelined behind a refused one are not read by the bookie, which closes
            # after its refusal: they were refused too, not lost to a fault (a reader would try
            # elsewhere or report a broken connection instead of the missing credentials).
            self._fail_all(self._refusal or BookieUnavailableError(
                f"connection to {self.address} was lost"))

    async def _write_loop(self, stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while True:
                # `submit` writes a lone request itself while nothing is queued or being sent
                self._sending = False
                if isinstance(stream, trio.SocketStream):  # never past TLS
                    self._fd = stream.socket.fileno()
                await self._work.wait()
                self._sending = True
                # one more scheduling round lets the other runnable writers queue their frames,
                # so they leave in one send instead of one send each
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._work = trio.Event()
                while self._outgoing:
                    frames, self._outgoing = self._outgoing, []
                    batch: list[bytes] = []
                    size = 0
                    for frame in frames:
                        batch.append(frame)
                        size += len(frame)
                        if size >= _SEND_BATCH_BYTES:
                            await self._send(stream, batch)
                            batch, size = [], 0
                    if batch:
                        await self._send(stream, batch)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio.TooSlowError) as exc:  # fmt: skip
            log.info("writing to bookie %s failed: %r", self.address, exc)
            scope.cancel()
        finally:
            self._fd = -1

    async def _send(self, stream: trio.abc.Stream, batch: list[bytes]) -> None:
        with trio.fail_after(self._timeout_s):
            await stream.send_all(batch[0] if len(batch) == 1 else b"".join(batch))

    async def _read_loop(self, stream: trio.abc.Stream, decoder: FrameDecoder) -> None:
        """Dispatch responses until the connection ends (EOF, error or a bad frame)."""
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None  # never TLS
        try:
            while True:
                into = decoder.receive_buffer() if sock is not None else None
                if into is not None and sock is not None:
                    # the rest of a large frame (a batch answer) straight into its buffer: no
                    # bytes object per receive, no copy into the decoder
                    count = await sock.recv_into(into)
                    into.release()
                    if not count:
                        return  # the bookie closed the connection
                    responses = decoder.received(count)
                else:
                    # the rest of a large frame in one receive, not 64 KiB at a time
                    data = await stream.receive_some(
                        min(max(_RECEIVE_BYTES, decoder.missing_bytes), _MAX_RECEIVE_BYTES))
                    if not data:
                        return  # the bookie closed the connection
                    responses = decoder.feed(data)
                for response in responses:
                    in_flight = self._in_flight.pop(response.request_id, None)
                    if (self._secret is None
                            and getattr(response, "status", None) is Status.UNAUTHORIZED):
                        self._refusal = BookieRequestError(
                            f"bookie {self.address} answered UNAUTHORIZED to a connection "
                            "without a bookie secret or read ticket, and closes it",
                            int(Status.UNAUTHORIZED))  # fmt: skip
                    if in_flight is not None:  # else it already timed out
                        _deliver(in_flight.callback, cast(Response, response))  # responses only
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                ProtocolError) as exc:  # fmt: skip
            log.info("connection to bookie %s failed: %r", self.address, exc)

    async def _sweep_expired(self) -> None:
        while True:
            if not self._in_flight:  # idle connection: sleep until a request is submitted
                self._requests_waiting = trio.Event()
                await self._requests_waiting.wait()
            await trio.sleep(_SWEEP_INTERVAL_S)
            now = trio.current_time()
            expired = [rid for rid, f in self._in_flight.items() if f.deadline <= now]
            for rid in expired:
                in_flight = self._in_flight.pop(rid)
                error = BKTimeoutError(f"bookie {self.address} did not answer in time")
                _deliver(in_flight.callback, error)

    def _fail_all(self, error: LedgerError) -> None:
        self._outgoing = []
        in_flight, self._in_flight = self._in_flight, {}
        for entry in in_flight.values():
            _deliver(entry.callback, error)


class LocalBookieConnection:
    """A connection to a bookie served by this process: requests go to its `answer()` directly.

    Same interface and outcomes as BookieConnection (callbacks get the response, or
    BKTimeoutError / BookieUnavailableError), minus the encoding and the sockets. Deadlines are
    kept like BookieConnection keeps them (a sweeper task while requests are in flight), not
    with a cancel scope per request.  Each request is answered by a worker task that parks
    for the next request afterwards (`submit` reschedules a parked worker with the request).
    """

    def __init__(self, address: str, nursery: trio.Nursery, *, timeout_s: float) -> None:
        self.address = address
        self._nursery = nursery
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._in_flight: dict[int, _InFlight] = {}
        self._sweeping = False
        self._closed = False
        self._idle_workers: ParkedTasks[_LocalJob | None] = ParkedTasks()
        self.batch_reads = True  # as BookieConnection's (client/batch_reads.py)
        self.batch_answers = 0
        self.batch_losses = 0

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def submit(
        self, build: Callable[[int], Request], callback: ResponseCallback,
        timeout_s: float | None = None,
    ) -> None:  # fmt: skip
        server = local_bookies.lookup(self.address)
        if self._closed or server is None:
            _deliver(callback, BookieUnavailableError(f"bookie {self.address} is not serving"))
            return
        request_id = next(self._ids)
        request = build(request_id)
        wait = self._timeout_s if timeout_s is None else timeout_s
        self._in_flight[request_id] = _InFlight(trio.current_time() + wait, callback)
        start_add = getattr(server, "start_add", None)
        if type(request) is AddEntryRequest and start_add is not None and \
                start_add(request, functools.partial(self._answered, request_id)):
            pass  # answered from the journal's completion: no worker task for an add
        elif self._idle_workers.hand((server, request, request_id)):
            pass  # a parked worker took it: no task created per request
        else:
            self._nursery.start_soon(self._answer_requests, (server, request, request_id))
        if not self._sweeping:
            self._sweeping = True
            self._nursery.start_soon(self._sweep_expired)

    def _answered(self, request_id: int, response: Response) -> None:
        in_flight = self._in_flight.pop(request_id, None)
        if in_flight is not None:  # else it timed out (or the connection closed) meanwhile
            _deliver(in_flight.callback, response)

    async def _answer_requests(self, job: _LocalJob | None) -> None:
        """A worker: answer `job`, then park until `submit` hands over the next one.  As many
        workers exist as requests were ever in flight at once (an add waits for its journal
        group's fsync), at most _MAX_IDLE_LOCAL_WORKERS of them parked."""
        while job is not None:
            server, request, request_id = job
            response = cast(Response, await server.answer(request))  # a bookie answers requests
            in_flight = self._in_flight.pop(request_id, None)
            if in_flight is not None:  # else it timed out (or the connection closed) meanwhile
                _deliver(in_flight.callback, response)
            if self._closed or len(self._idle_workers) >= _MAX_IDLE_LOCAL_WORKERS:
                return
            # a parked worker holds nothing of its last request (the writer's callback: a
            # closed ledger's handle and its entry) until its next job
            job = request = response = in_flight = None  # type: ignore[assignment]
            job = await self._idle_workers.park()  # a job from `submit`, None from `close`

    async def _sweep_expired(self) -> None:
        try:
            while self._in_flight:
                await trio.sleep(_SWEEP_INTERVAL_S)
                now = trio.current_time()
                expired = [rid for rid, f in self._in_flight.items() if f.deadline <= now]
                for rid in expired:
                    in_flight = self._in_flight.pop(rid)
                    _deliver(in_flight.callback,
                             BKTimeoutError(f"bookie {self.address}: no answer in time"))
        finally:
            self._sweeping = False

    async def request(self, build: Callable[[int], Request], timeout_s: float | None = None
                      ) -> Response:  # fmt: skip
        """Send one request and wait for its response (or raise the LedgerError)."""
        return await _request(self, build, timeout_s)

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes] | None:
        """Stored bodies of entries first..last in one call into the local bookie's storage, or
        None when that shortcut is unavailable or anything goes wrong (the caller then reads
        entry by entry through `answer()`, which gives every error its proper status).

        Only plain reads take this path: no fencing, no long poll, nothing a bookie answers
        differently from a run of ReadEntryRequests that all succeed."""
        server = local_bookies.lookup(self.address)
        storage = getattr(server, "storage", None)
        read_range = getattr(storage, "read_entries", None)
        if self._closed or read_range is None:
            return None
        with trio.move_on_after(self._timeout_s):
            try:
                return list(await read_range(ledger_id, first, last))
            except Exception as exc:  # noqa: BLE001 - the per-entry path reports it properly
                log.debug("local range read %d:%d..%d fell back: %r", ledger_id, first, last,
                          exc)  # fmt: skip
                return None
        return None

    async def close(self) -> None:
        self._closed = True
        self._idle_workers.hand_all(None)
        await trio.lowlevel.checkpoint()


def check_status(response: Response, address: str) -> None:
    """Raise the LedgerError that a non-OK status means for a caller that expects OK."""
    from ledger_backend.client.errors import (
        BookieRequestError,
        LedgerFencedError,
        NoSuchEntryError,
        NoSuchLedgerError,
    )

    status = response.status
    if status is Status.OK:
        return
    message = f"bookie {address} answered {status.name} to {type(response).__name__}"
    if status is Status.FENCED:
        raise LedgerFencedError(message)
    if status is Status.NO_SUCH_ENTRY:
        raise NoSuchEntryError(message)
    if status is Status.NO_SUCH_LEDGER:
        raise NoSuchLedgerError(message)
    if status is Status.TIMEOUT:
        raise BKTimeoutError(message)
    raise BookieRequestError(message, int(status))
