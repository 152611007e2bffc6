"""SaslHandshake (17) and SaslAuthenticate (36): drive the connection's `SaslSession`.

The session (protocols/kafka/sasl.py) lives in `ctx.session`, created by the listener for
connections on a SASL listener; the credentials come from `broker.credentials`
(gateway/security/credentials.py: `async lookup(user, mechanism)`).  A failed login is answered with
SASL_AUTHENTICATION_FAILED (or the handshake with UNSUPPORTED_SASL_MECHANISM) and leaves the
session FAILED, after which the listener closes the connection.  On a listener without SASL
both APIs answer ILLEGAL_SASL_STATE.  `authenticate_token` is shared with the raw-token path
of SaslHandshake v0.

Delegation tokens (`broker.delegation_tokens`, gateway/security/delegation_tokens.py): a SCRAM
login whose first message carries `tokenauth=true` (Kafka's Java clients send it) is checked
against the token of that id only, never a user.  librdkafka (confluent-kafka, and the clients
built on it) has no way to send a SCRAM extension -- its client-first message is always
`n,,n=<user>,r=<nonce>`, and its only SASL extensions setting is for OAUTHBEARER -- so a SCRAM
login without the extension whose name is not a user but is a live token id is checked
against that token: a user of the same name always wins, so the fallback can never take a
login away from a user, and it needs the token's HMAC like any token login.

This module must never log tokens (they hold passwords and proofs).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    ErrorCode,
    IllegalSaslStateError,
    KafkaProtocolError,
    SaslAuthenticationFailedError,
)
from protocols.kafka.sasl import PLAIN, SaslSession

log = logging.getLogger("ledgerwire.kafka.sasl")


def _session(ctx: RequestContext) -> SaslSession:
    session = ctx.session
    if not isinstance(session, SaslSession):
        raise IllegalSaslStateError("this listener does not use SASL")
    return session


async def authenticate_token(ctx: RequestContext, token: bytes) -> bytes:
    """Feed one client token to the session; the server's answer token (see module doc)."""
    session = _session(ctx)
    user = session.username_in(token)
    credential = None
    owner = None
    if user is not None:
        credentials: Any = getattr(ctx.broker, "credentials", None)
        tokens: Any = getattr(ctx.broker, "delegation_tokens", None)
        by_token = session.token_auth_in(token)
        if credentials is not None and not by_token:
            credential = await credentials.lookup(user, session.mechanism)
        if credential is None and tokens is not None and session.mechanism != PLAIN:
            found = await tokens.scram_credential(user, session.mechanism)
            if found is not None:
                credential, owner = found[0], found[1].owner
    try:
        if session.mechanism == PLAIN:  # PBKDF2 of the password: keep it off the event loop
            reply = await trio.to_thread.run_sync(session.authenticate, token, credential)
        else:
            reply = session.authenticate(token, credential, owner)
    except SaslAuthenticationFailedError:
        log.warning("SASL authentication failed", extra={
            "client": ctx.client_address, "user": user, "mechanism": session.mechanism})
        raise
    if session.authenticated:
        log.info("SASL authentication succeeded", extra={
            "client": ctx.client_address, "principal": session.principal,
            "mechanism": session.mechanism, "token": session.token_authenticated})
    return reply


async def handle_sasl_handshake(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    session = ctx.session if isinstance(ctx.session, SaslSession) else None
    mechanisms = list(session.enabled_mechanisms) if session is not None else []
    try:
        _session(ctx).handshake(body.get("mechanism") or "", header.api_version)
    except KafkaProtocolError as exc:
        return {"error_code": int(exc.code), "mechanisms": mechanisms}
    return {"error_code": 0, "mechanisms": mechanisms}


async def handle_sasl_authenticate(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    try:
        reply = await authenticate_token(ctx, bytes(body.get("auth_bytes") or b""))
    except KafkaProtocolError as exc:
        return {"error_code": int(exc.code), "error_message": exc.message,
                "auth_bytes": b"", "session_lifetime_ms": 0}
    lifetime_ms = 0
    session = _session(ctx)
    reauth_ms = int(getattr(ctx.broker.config, "connections_max_reauth_ms", 0) or 0)
    if session.authenticated and reauth_ms > 0 and header.api_version >= 1:
        # KIP-368: the client must log in again within this time (v0 clients cannot)
        lifetime_ms = reauth_ms
        session.expires_at = trio.current_time() + reauth_ms / 1000
    return {"error_code": int(ErrorCode.NONE), "error_message": None, "auth_bytes": reply,
            "session_lifetime_ms": lifetime_ms}
