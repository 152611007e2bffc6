"""The bookie server: bookie wire protocol over TCP in front of a BookieStorage.

One task per connection reads frames; each request runs as its own task so adds are pipelined
(many in flight per connection, each answered when its journal fsync is done) and a long poll
never blocks the adds behind it. Responses carry request ids and may go out of order; one
writer task per connection owns the socket's send side and coalesces small responses.

With a ``secret`` every connection must first pass the AUTH handshake (bookie/auth.py) within
``auth_timeout_s``, with frames of at most PRE_AUTH_MAX_FRAME_BYTES; any other request before
that is answered UNAUTHORIZED and the connection closed, so an unauthenticated peer reads,
adds, fences and lists nothing. A malformed, oversize or truncated frame closes that
connection only (logged with the peer address). With a metadata store the bookie keeps an
ephemeral node at /ledgerwire/bookies/available/<host:port> (registration.py). Shutdown
(cancelling serve_bookie) stops accepting, stops reading, lets in-flight requests finish for
``drain_timeout_s``, then cancels the rest.

What each request gets (adds, reads, long polls, LAC, info, and the master-key checks of adds
and fencing reads) is request_answers.py; this module carries requests and responses.

A connection that authenticated with a read ticket (bookie/read_ticket.py) runs only what the
ticket's scope allows (non-fencing reads of its ledgers until it expires); anything else is
answered UNAUTHORIZED.

A batch read (READ_ENTRIES) is answered with at most ``max_batch_entries`` entries and
``max_batch_bytes`` bytes whatever the request asks (and never more than half a frame), so
one request can make the bookie hold only that much for it. With ``batch_reads=False`` it is
answered BAD_REQUEST (clients then read that bookie entry by entry).

This module must never run a request of an unauthenticated connection to a bookie with a
secret, never acknowledge an add before ``storage.add_entry`` returned (that is the journal
fsync), and never closes the storage: its owner (``open_bookie_storage``) does.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import ssl

import trio

from ledger_backend.bookie import local_bookies
from ledger_backend.bookie.auth import (
    PRE_AUTH_MAX_FRAME_BYTES,
    BookieHandshake,
    BookieSecret,
    refusal,
)
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.ledger_keys import LedgerKeys
from ledger_backend.bookie.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    AddEntryRequest,
    AuthRequest,
    BookieAddress,
    Message,
    ProtocolError,
    Status,
    encode,
)
from ledger_backend.bookie.registration import (
    AVAILABLE_BOOKIES_PATH,
    BookieRegistrationError,
    Registration,
)
from ledger_backend.bookie.request_answers import (
    MAX_BATCH_BYTES,
    MAX_BATCH_ENTRIES,
    BookieAnswers,
)
from ledger_backend.bookie.storage_api import BookieStorage
from ledger_backend.metadata.store import MetadataStore

__all__ = ["AVAILABLE_BOOKIES_PATH", "BookieAddress", "BookieRegistrationError", "serve_bookie"]

logger = logging.getLogger(__name__)

_RECEIVE_BYTES = 64 * 1024  # below glibc's mmap threshold: recv(n) allocates n bytes first
_COALESCE_BYTES = 64 * 1024
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


async def serve_bookie(
    storage: BookieStorage,
    store: MetadataStore | None,
    host: str,
    port: int,
    *,
    bookie_id: str | None = None,
    advertised_host: str | None = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    max_in_flight_per_connection: int = 4096,
    max_in_flight_bytes_per_connection: int = 64 << 20,
    max_batch_entries: int = MAX_BATCH_ENTRIES,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    batch_reads: bool = True,
    drain_timeout_s: float = 5.0,
    secret: BookieSecret | None = None,
    auth_timeout_s: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[BookieAddress] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the bookie protocol on host:port until cancelled (then drain and return).

    ``task_status.started`` gets the advertised BookieAddress with the bound port (port 0 is
    allowed). ``store`` is a MetadataStore (or None: no registration). ``bookie_id`` defaults
    to the advertised "host:port". ``secret``: connections must authenticate with it first;
    ``ssl_context`` (bookie/tls.py): connections are TLS only, the handshake within
    ``auth_timeout_s``.
    """
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    if port == 0 and len(listeners) > 1:
        # each address family got its own random port: advertise (and keep) only one
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    bound_port = listeners[0].socket.getsockname()[1]
    if advertised_host is None:
        advertised_host = socket.gethostname() if host in _WILDCARD_HOSTS else host
    address = BookieAddress(advertised_host, bound_port)
    server = _BookieServer(
        storage,
        bookie_id or str(address),
        max_frame_bytes=max_frame_bytes,
        max_in_flight_per_connection=max_in_flight_per_connection,
        max_in_flight_bytes_per_connection=max_in_flight_bytes_per_connection,
        max_batch_entries=max_batch_entries,
        max_batch_bytes=max_batch_bytes if batch_reads else 0,
        secret=secret,
        auth_timeout_s=auth_timeout_s,
        ssl_context=ssl_context,
        keys=LedgerKeys(store) if store is not None else None,
    )
    registration: Registration | None = None
    if store is not None:
        node_data = json.dumps(
            {
                "bookie_id": server.bookie_id,
                "address": str(address),
                "host": address.host,
                "port": address.port,
            }
        ).encode()
        registration = Registration(
            store, f"{AVAILABLE_BOOKIES_PATH}/{address}", node_data, server.bookie_id
        )
    try:
        if registration is not None:
            await registration.register_first()
        async with trio.open_nursery() as root:
            connections = await root.start(server.run_connection_nursery)
            if registration is not None:
                root.start_soon(registration.keep_registered)
            for listener in listeners:
                root.start_soon(server.accept_loop, listener, connections)
            logger.info("bookie %s serving on %s (%s, %s)", server.bookie_id, address,
                        "connections authenticated" if secret else "NO authentication",
                        "TLS" if ssl_context else "plaintext")  # fmt: skip
            local_bookies.register(str(address), server.answers)
            task_status.started(address)
            try:
                await trio.sleep_forever()
            finally:
                local_bookies.unregister(str(address), server.answers)
                with trio.CancelScope(shield=True):
                    # stop accepting, stop being offered to writers, then drain
                    for listener in listeners:
                        await listener.aclose()
                    if registration is not None:
                        await registration.deregister()
                    await server.drain(drain_timeout_s)
    finally:
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await trio.aclose_forcefully(listener)
            if registration is not None:
                await registration.deregister()
        logger.info("bookie %s on %s stopped", server.bookie_id, address)


class _Connection:
    """One client connection: its peer name, response queue and cancel scopes."""

    def __init__(self, stream: trio.abc.Stream, peer: str, max_in_flight: int,
                 handshake: BookieHandshake | None) -> None:  # fmt: skip
        self.stream = stream
        self.peer = peer
        self.handshake = handshake  # None: this bookie does not authenticate
        self.ticket_refusal_logged = False
        self.scope = trio.CancelScope()
        self.read_scope = trio.CancelScope()
        self.in_flight = trio.Semaphore(max_in_flight)
        # entry bytes held by unanswered adds: the reader pauses above the budget
        self.bytes_in_flight = 0
        self.bytes_released = trio.Event()
        self._responses_in, self._responses_out = trio.open_memory_channel[bytes](max_in_flight)

    async def respond(self, message: Message) -> None:
        try:
            await self._responses_in.send(encode(message))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the connection is going away; nobody is left to answer

    def finish_responses(self) -> None:
        self._responses_in.close()

    async def write_responses(self) -> None:
        """The only task that sends on this socket; small responses go out together."""
        try:
            async with self._responses_out:
                async for frame in self._responses_out:
                    batch = [frame]
                    size = len(frame)
                    while size < _COALESCE_BYTES:
                        try:
                            more = self._responses_out.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        batch.append(more)
                        size += len(more)
                    await self.stream.send_all(batch[0] if len(batch) == 1 else b"".join(batch))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            logger.debug("bookie connection %s: send failed (%s)", self.peer, exc)
            self.scope.cancel()


class _BookieServer:
    def __init__(
        self,
        storage: BookieStorage,
        bookie_id: str,
        *,
        max_frame_bytes: int,
        max_in_flight_per_connection: int,
        max_in_flight_bytes_per_connection: int,
        max_batch_entries: int = MAX_BATCH_ENTRIES,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        secret: BookieSecret | None = None,
        auth_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        keys: LedgerKeys | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._secret = secret
        self._auth_timeout_s = auth_timeout_s
        self.bookie_id = bookie_id
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight_per_connection
        self._max_in_flight_bytes = max_in_flight_bytes_per_connection
        self.answers = BookieAnswers(
            storage, bookie_id, max_batch_entries=max_batch_entries,
            # 0: batch reads are not served
            max_batch_bytes=max(0, min(max_batch_bytes, max_frame_bytes // 2)), keys=keys,
        )  # fmt: skip
        self._connections: set[_Connection] = set()
        self._draining = False
        self._idle = trio.Event()
        self._idle.set()
        self._connection_scope: trio.CancelScope | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def run_connection_nursery(
        self, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # shielded so that cancelling serve_bookie does not cut connections mid-request:
        # drain() decides when they end
        with trio.CancelScope(shield=True) as scope:
            self._connection_scope = scope
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await trio.sleep_forever()

    async def drain(self, timeout_s: float) -> None:
        """Stop reading requests, let in-flight ones finish (bounded), then cancel the rest."""
        self._draining = True
        for conn in list(self._connections):
            conn.read_scope.cancel()
        self.answers.end_long_polls()  # answered as TIMEOUT with the current LAC
        with trio.move_on_after(timeout_s) as waited:
            await self._idle.wait()
        if waited.cancelled_caught:
            logger.warning("bookie %s: %d connections did not drain in %.1fs; cancelling",
                           self.bookie_id, len(self._connections), timeout_s)  # fmt: skip
        if self._connection_scope is not None:
            self._connection_scope.cancel()

    async def accept_loop(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                logger.error("bookie %s: accept failed: %s", self.bookie_id, exc)
                await trio.sleep(0.1)
                continue
            if self._draining:
                await trio.aclose_forcefully(stream)
                continue
            connections.start_soon(self.serve_connection, stream)

    # --- one connection -----------------------------------------------------------------

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            peer = str(BookieAddress(*stream.socket.getpeername()[:2]))
        except OSError:
            peer = "<unknown peer>"
        transport: trio.abc.Stream = stream
        if self._ssl_context is not None:
            tls = trio.SSLStream(stream, self._ssl_context, server_side=True)
            try:
                with trio.fail_after(self._auth_timeout_s):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                    OSError) as exc:  # fmt: skip
                logger.warning("bookie connection %s: TLS handshake failed, closing: %s",
                               peer, exc.__cause__ or exc)  # fmt: skip
                await trio.aclose_forcefully(stream)
                return
            transport = tls
        handshake = BookieHandshake(self._secret) if self._secret is not None else None
        conn = _Connection(transport, peer, self._max_in_flight, handshake)
        self._connections.add(conn)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        try:
            with conn.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(conn.write_responses)
                    try:
                        async with trio.open_nursery() as handlers:
                            await self._read_requests(conn, handlers)
                    finally:
                        conn.finish_responses()  # the writer flushes what is left, then ends
        except Exception:  # a bug must cost this connection, never the whole bookie
            logger.exception("bookie connection %s: failed; closing it", peer)
        finally:
            self._connections.discard(conn)
            if not self._connections:
                self._idle.set()
            await trio.aclose_forcefully(transport)

    async def _read_requests(self, conn: _Connection, handlers: trio.Nursery) -> None:
        decoder = FrameDecoder(self._max_frame_bytes, accept="requests")
        if conn.handshake is not None:
            decoder.max_frame_bytes = PRE_AUTH_MAX_FRAME_BYTES
            conn.read_scope.deadline = trio.current_time() + self._auth_timeout_s
        with conn.read_scope:
            if self._draining:
                conn.read_scope.cancel()
            try:
                while True:
                    data = await conn.stream.receive_some(_RECEIVE_BYTES)
                    if not data:
                        if decoder.buffered_bytes:
                            logger.warning(
                                "bookie connection %s: closed mid-frame (%d bytes of a frame)",
                                conn.peer, decoder.buffered_bytes,
                            )  # fmt: skip
                        # the peer is gone: nobody can receive what is still in flight
                        conn.scope.cancel()
                        return
                    for request in decoder.feed(data):
                        if conn.handshake is not None and not conn.handshake.authenticated:
                            if not await self._authenticate(conn, request, decoder):
                                return  # the refusal is flushed, then the connection closes
                            continue
                        if conn.handshake is not None and conn.handshake.scope is not None \
                                and not conn.handshake.scope.allows(request):  # fmt: skip
                            await self._refuse_outside_ticket(conn, request)
                            continue
                        size = len(request.body) if type(request) is AddEntryRequest else 0
                        while conn.bytes_in_flight and (
                            conn.bytes_in_flight + size > self._max_in_flight_bytes
                        ):
                            await conn.bytes_released.wait()
                        await conn.in_flight.acquire()
                        conn.bytes_in_flight += size
                        handlers.start_soon(self._handle, conn, request, size)
            except ProtocolError as exc:
                if conn.handshake is not None and not conn.handshake.authenticated:
                    logger.warning("bookie connection %s: bad frame before authentication, "
                                   "closing: %s", conn.peer, exc)  # fmt: skip
                    conn.scope.cancel()
                    return
                logger.warning("bookie connection %s: bad frame, closing: %s", conn.peer, exc)
                conn.scope.cancel()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                logger.debug("bookie connection %s: receive failed (%s)", conn.peer, exc)
                conn.scope.cancel()

        if (conn.read_scope.cancelled_caught and not self._draining
                and conn.handshake is not None and not conn.handshake.authenticated):  # fmt: skip
            logger.warning("bookie connection %s: no authentication within %.0fs; closing",
                           conn.peer, self._auth_timeout_s)  # fmt: skip

    async def _refuse_outside_ticket(self, conn: _Connection, request: Message) -> None:
        """A request of a read-ticket connection that its scope does not allow (another
        ledger, a write or fence, or after the expiry): refused, one line per connection."""
        assert conn.handshake is not None and conn.handshake.scope is not None
        scope = conn.handshake.scope
        if not conn.ticket_refusal_logged:
            conn.ticket_refusal_logged = True
            logger.warning("bookie connection %s: %s of ledger %s refused: outside the read "
                           "ticket of User:%s%s", conn.peer, type(request).__name__,
                           getattr(request, "ledger_id", "-"), scope.principal,
                           " (expired)" if scope.expired() else "")  # fmt: skip
        await conn.respond(refusal(request, Status.UNAUTHORIZED))  # type: ignore[arg-type]

    async def _authenticate(self, conn: _Connection, request: Message,
                            decoder: FrameDecoder) -> bool:  # fmt: skip
        """One handshake step of a connection that has not authenticated yet; False when the
        connection must close (its refusal is queued)."""
        assert conn.handshake is not None
        if type(request) is not AuthRequest:
            logger.warning("bookie connection %s: %s before authentication; refused, closing",
                           conn.peer, type(request).__name__)  # fmt: skip
            await conn.respond(refusal(request, Status.UNAUTHORIZED))  # type: ignore[arg-type]
            return False
        response = conn.handshake.answer(request)
        await conn.respond(response)
        if response.status is not Status.OK:
            logger.warning("bookie connection %s: authentication failed (%s); closing",
                           conn.peer, conn.handshake.refusal or "wrong bookie secret or "
                           "read ticket?")  # fmt: skip
            return False
        if conn.handshake.authenticated:
            decoder.max_frame_bytes = self._max_frame_bytes
            conn.read_scope.deadline = math.inf
            logger.debug("bookie connection %s: authenticated", conn.peer)
        return True

    async def _handle(self, conn: _Connection, request: Message, size: int) -> None:
        try:
            await self._answer(conn, request)
        except Exception:
            # an answer we cannot produce or encode: this connection is in an unknown state
            logger.exception(
                "bookie connection %s: failed to answer %s request %d",
                conn.peer, type(request).__name__, request.request_id,
            )  # fmt: skip
            conn.scope.cancel()
        finally:
            conn.in_flight.release()
            if size:
                conn.bytes_in_flight -= size
                conn.bytes_released.set()
                conn.bytes_released = trio.Event()

    async def _answer(self, conn: _Connection, request: Message) -> None:
        await conn.respond(await self.answers.answer(request))
