"""Which new Kafka connections a listener admits, and as whom.

- Kafka's max.connections and max.connections.per.ip, counted from accept to close (TLS
  handshakes included): `ConnectionLimits.admitted(host)` is a context manager that refuses
  (ConnectionRefused, with the reason) or counts the connection until the block ends.  A limit
  of 0 means none.
- TLS: `tls_handshake` completes the server side of the handshake within
  `TLS_HANDSHAKE_TIMEOUT_S`; `certificate_identity` names an SSL listener's client by its
  certificate (protocols/kafka/ssl_principal.py), User:ANONYMOUS without one.

This module must never read or write Kafka frames: the listener serves what is admitted and
closes what is refused.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from protocols.kafka.acl_model import ANONYMOUS
from protocols.kafka.ssl_principal import (
    CertificateIdentity,
    NoMatchingRuleError,
    SslPrincipalMapper,
)

log = logging.getLogger("ledgerwire.kafka.listener")
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class ConnectionRefused(Exception):
    """A limit is reached; the message says which."""


class ConnectionLimits:
    def __init__(self, max_connections: int = 0, max_connections_per_ip: int = 0) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.open = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0

    def _refusal(self, host: str) -> str | None:
        if self.max_connections and self.open >= self.max_connections:
            return f"max_connections={self.max_connections} reached"
        if self.max_connections_per_ip and \
                self.per_ip.get(host, 0) >= self.max_connections_per_ip:
            return f"max_connections_per_ip={self.max_connections_per_ip} reached for {host}"
        return None

    @contextmanager
    def admitted(self, host: str) -> Iterator[None]:
        refusal = self._refusal(host)
        if refusal is not None:
            self.refused += 1
            raise ConnectionRefused(refusal)
        self.open += 1
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        try:
            yield
        finally:
            self.open -= 1
            left = self.per_ip[host] - 1
            if left:
                self.per_ip[host] = left
            else:
                del self.per_ip[host]


async def tls_handshake(stream: trio.SocketStream, context: ssl.SSLContext,
                        peer: str) -> trio.SSLStream[trio.SocketStream] | None:
    """The TLS stream once its handshake is done, or None (logged; `stream` closed)."""
    tls = trio.SSLStream(stream, context, server_side=True)
    try:
        with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
            await tls.do_handshake()
    except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("TLS handshake failed", extra={"client": peer, "error": repr(exc)})
        await trio.aclose_forcefully(stream)
        return None
    return tls


def certificate_identity(tls: trio.SSLStream[trio.SocketStream], mapper: SslPrincipalMapper,
                         peer: str) -> CertificateIdentity | None:
    """The client's principal by its certificate; None when no mapping rule names it (then
    the client is refused, as Kafka fails the authentication)."""
    certificate = tls.getpeercert()
    try:
        principal = mapper.principal(certificate["subject"]) if certificate else ANONYMOUS
    except NoMatchingRuleError as exc:
        log.warning("TLS client refused: %s", exc, extra={"client": peer})
        return None
    return CertificateIdentity(principal)
