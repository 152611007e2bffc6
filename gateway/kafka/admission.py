"""Which new Kafka connections a listener admits, and as whom.

- Kafka's max.connections and max.connections.per.ip, counted from accept to close (TLS
  handshakes included): gateway/security/connection_limits.py (the RocketMQ ports use it too).
- TLS: `tls_handshake` completes the server side of the handshake within
  `TLS_HANDSHAKE_TIMEOUT_S` (a connection closed before its first byte, such as a peer
  broker's liveness probe, gateway/cluster/peer_liveness.py, is logged at DEBUG only: it is
  no failed client); `certificate_identity` names an SSL listener's client by its
  certificate (protocols/kafka/ssl_principal.py), User:ANONYMOUS without one.

This module must never read or write Kafka frames: the listener serves what is admitted and
closes what is refused.
"""

from __future__ import annotations

import logging
import socket
import ssl

import trio

from gateway.security.connection_limits import ConnectionLimits, ConnectionRefused
from protocols.kafka.acl_model import ANONYMOUS
from protocols.kafka.ssl_principal import (
    CertificateIdentity,
    NoMatchingRuleError,
    SslPrincipalMapper,
)

__all__ = ["ConnectionLimits", "ConnectionRefused", "certificate_identity", "tls_handshake"]
log = logging.getLogger("ledgerwire.kafka.listener")
TLS_HANDSHAKE_TIMEOUT_S = 10.0


async def tls_handshake(stream: trio.SocketStream, context: ssl.SSLContext,
                        peer: str) -> trio.SSLStream[trio.SocketStream] | None:
    """The TLS stream once its handshake is done, or None (logged; `stream` closed)."""
    tls = trio.SSLStream(stream, context, server_side=True)
    try:
        with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
            if await _closed_before_first_byte(stream):
                log.debug("connection closed before its first byte", extra={"client": peer})
                await trio.aclose_forcefully(stream)
                return None
            await tls.do_handshake()
    except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("TLS handshake failed", extra={"client": peer, "error": repr(exc)})
        await trio.aclose_forcefully(stream)
        return None
    return tls


async def _closed_before_first_byte(stream: trio.SocketStream) -> bool:
    """Whether the peer closed (or reset) the connection without sending a byte; waits for
    its first byte otherwise, and leaves it unread for the handshake."""
    try:
        return await stream.socket.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset before a byte: the same, as far as TLS is concerned
        return True


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
