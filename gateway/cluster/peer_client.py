"""Broker-to-broker requests over the Kafka protocol, for what a cluster broker must ask the
owner of a partition to do (a transaction coordinator's WriteTxnMarkers, the offsets of a
committed transaction for a group coordinator on another broker).

A small pool of connections per peer address (at most `MAX_CONNECTIONS_PER_PEER`), each
carrying one request at a time; an idle connection is reused (the newest first), another is
opened while all are busy, and a request waits for a free one only when the pool is full, so a
slow request (a marker append waiting on a bookie) never holds up the others.  Waiting for a
free connection and the request itself each have the timeout; a caller that gave up waiting
takes nothing down.  Only the connection whose request failed, was cancelled or timed out on
the wire is closed (half a request or an unread answer makes it unusable), and after a broken
one the idle ones are closed too (the peer may have restarted on the same address), so the
next request reconnects.

On a secured cluster the peer logs in first, as Kafka brokers do with
sasl.mechanism.inter.broker.protocol and their own JAAS user: `PeerSecurity` (built from the
[security] inter_broker_* settings by `peer_security_from_config`) says whether to speak TLS
(verifying the peer with the listener's CA) and which SASL mechanism, user and password to use;
each new connection then sends SaslHandshake and SaslAuthenticate (protocols/kafka/sasl_client.py
makes the tokens) before its first request.  A refused login raises `PeerAuthenticationError`,
is logged once in a while as an error naming the user and the setting to fix, and the address is
not tried again for `AUTH_RETRY_BACKOFF_S` (a wrong password must not hammer the peer's PBKDF2).

A caller that pipelines (gateway/replication's produce pipeline: several Produce requests in
flight to one partition, answered in order) takes a `PeerConnection` of its own from
`open_connection`: logged in like a pooled one, outside the pool, closed by its owner (or by
`aclose` of the client).  Its answers are matched to requests by correlation id, oldest first.

This module must never decide *where* a request goes (callers look owners up in the ownership
service) nor retry: a failed request raises, and the caller's own retry loop decides.  It must
never log, repr or keep in an exception the inter-broker password.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from gateway.config.settings import Config, ConfigError
from protocols.kafka.codec import RequestHeader, decode_response, encode_request
from protocols.kafka.errors import (
    ErrorCode,
    KafkaProtocolError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
)
from protocols.kafka.framing import FrameReader
from protocols.kafka.sasl import PLAIN, SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocols.kafka.sasl_client import SaslClient

log = logging.getLogger("ledgerwire.peers")

PEER_REQUEST_TIMEOUT_S = 5.0  # markers take milliseconds; a paused peer must not stall EndTxn
MAX_CONNECTIONS_PER_PEER = 4  # requests in flight to one peer; more wait for a free connection
AUTH_RETRY_BACKOFF_S = 5.0  # after a refused login, fail fast for this long
AUTH_FAILURE_LOG_INTERVAL_S = 60.0  # one error line per peer this often, not one per retry
SASL_HANDSHAKE_VERSION = 1  # tokens in SaslAuthenticate requests (v0 would send raw frames)
SASL_AUTHENTICATE_VERSION = 2


class PeerUnavailableError(KafkaProtocolError):
    """The peer broker could not be reached or did not answer (retriable by the caller)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class PeerAuthenticationError(SaslAuthenticationFailedError):
    """The peer refused this broker's inter-broker login (a configuration error to fix)."""


@dataclass(frozen=True)
class PeerSecurity:
    """How this broker connects to its peers: TLS context (None: plaintext) and SASL login
    (mechanism None: no SASL).  The password is never part of repr()."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    user: str = ""
    password: str = field(default="", repr=False)

    @property
    def principal(self) -> str | None:
        return f"User:{self.user}" if self.sasl_mechanism is not None else None

    def describe(self) -> str:
        transport = "TLS" if self.ssl_context is not None else "plaintext"
        if self.sasl_mechanism is None:
            return f"{transport}, no SASL"
        return f"{transport}, SASL {self.sasl_mechanism} as {self.user!r}"


def _inter_broker_password(config: Config) -> str:
    s = config.security
    if s.inter_broker_password:
        return s.inter_broker_password
    if s.inter_broker_password_file:
        try:
            return Path(s.inter_broker_password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read security.inter_broker_password_file "
                              f"{s.inter_broker_password_file}: {exc.strerror}") from None
    if s.inter_broker_password_env and s.inter_broker_password_env in os.environ:
        return os.environ[s.inter_broker_password_env]
    raise ConfigError(
        "security.inter_broker_user is set but no password was found: set "
        "security.inter_broker_password, security.inter_broker_password_file, or the "
        f"environment variable {s.inter_broker_password_env or '(inter_broker_password_env)'}")


def peer_client_ssl_context(config: Config) -> ssl.SSLContext:
    """TLS to peers, trusting security.inter_broker_ssl_cafile (default: the listener's own
    certificate file, right for a cluster whose brokers share a certificate or its CA).  On
    an SSL listener the broker presents its own certificate: its mapped DN is its principal
    (list it in security.super_users, as Kafka operators list brokers in super.users)."""
    cafile = config.security.inter_broker_ssl_cafile or config.kafka.ssl_certfile
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the inter-broker CA file {cafile}: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = config.security.inter_broker_ssl_check_hostname
    if config.kafka.security_protocol == "SSL":  # as a Kafka broker: its keystore names it
        try:
            context.load_cert_chain(config.kafka.ssl_certfile, config.kafka.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the broker certificate for peers: {exc}") from exc
    return context


def peer_security_from_config(config: Config) -> PeerSecurity:
    """The way to the peers' listeners, which are configured like this broker's own: TLS for
    SSL/SASL_SSL, and for SASL_* a login with security.inter_broker_user (no SASL when it is
    unset: the caller warns, requests to peers will then be refused)."""
    protocol = config.kafka.security_protocol
    context = peer_client_ssl_context(config) if protocol in ("SSL", "SASL_SSL") else None
    s = config.security
    if not protocol.startswith("SASL_") or not s.inter_broker_user:
        return PeerSecurity(context)
    return PeerSecurity(context, s.inter_broker_mechanism, s.inter_broker_user,
                        _inter_broker_password(config))


@dataclass(eq=False)
class _Connection:
    stream: trio.abc.Stream
    reader: FrameReader = field(default_factory=FrameReader)
    next_correlation_id: int = 1
    frames: deque[Any] = field(default_factory=deque)  # answers read, not yet taken

    def send_frame(self, client_id: str, api_key: int, version: int,
                   body: dict[str, Any]) -> tuple[int, bytes]:
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        return correlation_id, encode_request(
            RequestHeader(api_key, version, correlation_id, client_id), body)

    async def next_frame(self) -> Any:
        while not self.frames:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed by the peer")
            self.frames.extend(self.reader.feed(data))
        return self.frames.popleft()


class PeerConnection:
    """A connection of one caller's own, for pipelined requests (see the module docstring).
    `send` and `receive` may run in different tasks; each is used by one task at a time."""

    def __init__(self, client: PeerClient, connection: _Connection,
                 address: tuple[str, int]) -> None:
        self._client = client
        self._connection = connection
        self.address = address
        self._pending: deque[tuple[int, int, int]] = deque()  # (correlation id, api, version)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        """Write one request; its correlation id.  A failure leaves the connection unusable."""
        correlation_id, data = self._connection.send_frame(self._client.client_id, api_key,
                                                           version, body)
        self._pending.append((correlation_id, api_key, version))
        await self._connection.stream.send_all(data)
        return correlation_id

    async def receive(self) -> tuple[int, dict[str, Any]]:
        """The answer to the oldest request in flight: (its correlation id, its body)."""
        if not self._pending:
            raise EOFError("no request in flight")
        correlation_id, api_key, version = self._pending[0]
        frame = await self._connection.next_frame()
        got, answer = decode_response(api_key, version, frame)
        if got != correlation_id:
            raise EOFError(f"answer {got} where {correlation_id} was due")
        self._pending.popleft()
        return correlation_id, answer

    async def aclose(self) -> None:
        await self._client._close(self._connection)


@dataclass
class _Pool:
    """The connections to one peer address: `slots` bounds those in use, `idle` the reusable
    ones, and `opening` makes logins one at a time (a refused password is tried once, not once
    per waiting caller)."""

    slots: trio.Semaphore
    idle: list[_Connection] = field(default_factory=list)
    opening: trio.Lock = field(default_factory=trio.Lock)


class PeerClient:
    """Requests to other brokers of the cluster (see the module docstring)."""

    def __init__(self, client_id: str, timeout_s: float = PEER_REQUEST_TIMEOUT_S,
                 security: PeerSecurity | None = None,
                 max_connections: int = MAX_CONNECTIONS_PER_PEER) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security or PeerSecurity()
        self.max_connections = max_connections
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._open_connections: set[_Connection] = set()  # idle and in use, for aclose
        # address -> (refuse until, the refusal), after a failed login
        self._auth_refused: dict[tuple[str, int], tuple[float, PeerAuthenticationError]] = {}
        self._auth_logged: dict[tuple[str, int], float] = {}

    async def request(self, host: str, port: int, api_key: int, version: int,
                      body: dict[str, Any]) -> dict[str, Any]:
        """Send one request to host:port and return the answer's body."""
        address = (host, port)
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = _Pool(trio.Semaphore(self.max_connections))
        try:
            with trio.fail_after(self.timeout_s):
                await pool.slots.acquire()
        except trio.TooSlowError as exc:  # nothing of ours is on the wire: nothing to drop
            raise RequestTimedOutError(
                f"broker {host}:{port}: all {self.max_connections} connections stayed busy"
            ) from exc
        try:
            return await self._request_on(pool, address, api_key, version, body)
        finally:
            pool.slots.release()

    async def open_connection(self, host: str, port: int) -> PeerConnection:
        """A logged-in connection outside the pool, for a caller that pipelines on it."""
        address = (host, port)
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = _Pool(trio.Semaphore(self.max_connections))
        with trio.fail_after(self.timeout_s):
            return PeerConnection(self, await self._new(pool, address), address)

    async def _request_on(self, pool: _Pool, address: tuple[str, int], api_key: int,
                          version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One exchange on a connection of `pool` held by this caller alone."""
        host, port = address
        connection: _Connection | None = None
        try:
            with trio.fail_after(self.timeout_s):
                connection = pool.idle.pop() if pool.idle else await self._new(pool, address)
                answer = await self._exchange(connection, api_key, version, body)
        except trio.TooSlowError as exc:
            await self._close(connection)
            raise RequestTimedOutError(f"broker {host}:{port} did not answer") from exc
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, EOFError) as exc:
            await self._close(connection)
            await self._close_idle(pool)  # likely as stale: the peer went away
            raise PeerUnavailableError(f"broker {host}:{port}: {exc!r}") from exc
        except BaseException:  # cancelled mid-exchange, or an unreadable answer: unusable
            await self._close(connection)
            raise
        pool.idle.append(connection)
        return answer

    async def _new(self, pool: _Pool, address: tuple[str, int]) -> _Connection:
        """A new connection to `address`, logged in when the cluster uses SASL."""
        async with pool.opening:
            refused = self._auth_refused.get(address)
            if refused is not None and trio.current_time() < refused[0]:
                raise PeerAuthenticationError(f"{refused[1].message} (not retried yet)")
            connection = _Connection(await self._open(address))
            try:
                if self.security.sasl_mechanism is not None:
                    await self._authenticate(connection, address)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await connection.stream.aclose()
                raise
            self._auth_refused.pop(address, None)
            self._open_connections.add(connection)
            return connection

    async def _open(self, address: tuple[str, int]) -> trio.abc.Stream:
        context = self.security.ssl_context
        if context is None:
            return await trio.open_tcp_stream(*address)
        stream = await trio.open_ssl_over_tcp_stream(*address, ssl_context=context)
        try:
            await stream.do_handshake()  # a certificate problem shows here, named
        except BaseException:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            raise
        return stream

    async def _authenticate(self, connection: _Connection, address: tuple[str, int]) -> None:
        """SaslHandshake then SaslAuthenticate until the server accepts (or refuses)."""
        security = self.security
        mechanism = security.sasl_mechanism
        assert mechanism is not None
        try:
            answer = await self._exchange(connection, SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                                          {"mechanism": mechanism})
            if answer["error_code"]:
                raise PeerAuthenticationError(
                    f"the peer does not accept SASL mechanism {mechanism} "
                    f"({ErrorCode(answer['error_code']).name}; it enables "
                    f"{', '.join(answer.get('mechanisms') or []) or 'none'})")
            client = SaslClient(mechanism, security.user, security.password)
            token = client.first_token()
            while True:
                answer = await self._exchange(connection, SASL_AUTHENTICATE,
                                              SASL_AUTHENTICATE_VERSION, {"auth_bytes": token})
                if answer["error_code"]:
                    raise PeerAuthenticationError(
                        f"{ErrorCode(answer['error_code']).name}: "
                        f"{answer.get('error_message') or 'login refused'}")
                server_token = bytes(answer.get("auth_bytes") or b"")
                if mechanism == PLAIN or client.awaiting_server_final:
                    client.finish(server_token)
                    return
                token = await trio.to_thread.run_sync(client.next_token, server_token)
        except SaslAuthenticationFailedError as exc:
            refusal = exc if isinstance(exc, PeerAuthenticationError) else \
                PeerAuthenticationError(str(exc))
            self._refused(address, refusal)
            raise refusal from None

    def _refused(self, address: tuple[str, int], refusal: PeerAuthenticationError) -> None:
        now = trio.current_time()
        self._auth_refused[address] = (now + AUTH_RETRY_BACKOFF_S, refusal)
        if now >= self._auth_logged.get(address, -AUTH_FAILURE_LOG_INTERVAL_S) \
                + AUTH_FAILURE_LOG_INTERVAL_S:
            self._auth_logged[address] = now
            log.error(
                "inter-broker login to broker %s:%d as user %r (%s) refused: %s -- check "
                "security.inter_broker_user / inter_broker_password (or _password_file / "
                "_password_env) and that this user exists with that password on every broker "
                "(security.users); transactions spanning brokers fail until it is fixed",
                address[0], address[1], self.security.user, self.security.sasl_mechanism,
                refusal.message)

    async def _exchange(self, connection: _Connection, api_key: int, version: int,
                        body: dict[str, Any]) -> dict[str, Any]:
        correlation_id, data = connection.send_frame(self.client_id, api_key, version, body)
        await connection.stream.send_all(data)
        frame = await connection.next_frame()
        if connection.frames:  # one request in flight: anything more is a broken stream
            raise EOFError(f"{1 + len(connection.frames)} answers to one request")
        got, answer = decode_response(api_key, version, frame)
        if got != correlation_id:
            raise EOFError(f"answer {got} to request {correlation_id}")
        return answer

    async def _close(self, connection: _Connection | None) -> None:
        if connection is not None:
            self._open_connections.discard(connection)
            with trio.CancelScope(shield=True):
                await connection.stream.aclose()

    async def _close_idle(self, pool: _Pool) -> None:
        idle, pool.idle = pool.idle, []
        for connection in idle:
            await self._close(connection)

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.idle.clear()
        for connection in list(self._open_connections):
            await self._close(connection)
