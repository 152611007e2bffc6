"""Bookie connection authentication: a shared-secret challenge/response (sans-IO).

BookKeeper offers SASL/DIGEST-MD5 with a shared secret for the same purpose; this is the same
idea with HMAC-SHA256 and no SASL machinery. Every bookie and every ledger client of a cluster
is configured with one secret. On each new connection the client runs, before any request::

    client -> AUTH step 1: client nonce (32 random bytes)
    bookie -> AUTH step 1 OK: bookie nonce (32) + bookie proof (32)
    client -> AUTH step 2: client proof (32)                  (after checking the bookie proof)
    bookie -> AUTH step 2 OK                                  (or UNAUTHORIZED, then close)

with proof = HMAC-SHA256(secret, role label || client nonce || bookie nonce). A holder of a read
ticket (bookie/read_ticket.py) sends step 3 (client nonce + ticket body) instead of step 1; the
bookie derives the ticket's key from its secret and the handshake goes on with that key in the
secret's place, the connection then limited to the ticket's scope (`BookieHandshake.scope`).
Both sides prove
knowledge of the secret with fresh nonces (a recorded handshake cannot be replayed), and the
client refuses a bookie that cannot prove it (a fake bookie gets no entries). The traffic after
the handshake is not encrypted: run bookies on a private network (TLS is not offered yet).

This module must never log, compare with ``==`` or return the secret or a proof in a message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    AuthRequest,
    AuthResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    ReadEntriesRequest,
    ReadEntriesResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    ReadLacResponse,
    Request,
    Response,
    Status,
    WriteLacRequest,
    WriteLacResponse,
)
from ledger_backend.bookie.read_ticket import (
    KEY_BYTES,
    ReadTicket,
    TicketError,
    TicketScope,
    decode_body,
    ticket_key,
)
from ledger_backend.secret_files import read_secret_file

NONCE_BYTES: Final = 32
PROOF_BYTES: Final = 32
MIN_SECRET_BYTES: Final = 16
STEP_HELLO: Final = 1
STEP_PROOF: Final = 2
STEP_TICKET: Final = 3
# an unauthenticated peer may send only small frames (an AUTH step is under 60 bytes; a read
# ticket's step 3 names at most MAX_TICKET_LEDGERS ledgers, under 57 KB)
PRE_AUTH_MAX_FRAME_BYTES: Final = 64 * 1024
_BOOKIE_LABEL: Final = b"ledgerwire bookie auth v1: bookie"
_CLIENT_LABEL: Final = b"ledgerwire bookie auth v1: client"


class BookieAuthError(Exception):
    """The handshake failed: wrong secret, a bookie without one, or a malformed step."""


@dataclass(frozen=True)
class BookieSecret:
    """The cluster's shared bookie secret (never shown by repr)."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < MIN_SECRET_BYTES:
            raise ValueError(f"a bookie secret needs at least {MIN_SECRET_BYTES} bytes")

    @classmethod
    def load(cls, value: str | None = None, file: Path | str | None = None) -> BookieSecret | None:
        """From a configured value or a file (its first line); None when neither is set."""
        if value and file:
            raise ValueError("configure bookie_secret or bookie_secret_file, not both")
        if file:
            value = read_secret_file(file, "bookie secret")
        return cls(value.encode("utf-8")) if value else None

    def proof(self, label: bytes, client_nonce: bytes, bookie_nonce: bytes) -> bytes:
        return hmac.new(self.key, label + client_nonce + bookie_nonce, hashlib.sha256).digest()


BookieCredential = BookieSecret | ReadTicket


class ClientHandshake:
    """The client side: `hello()`, then `prove(response)`, then `finish(response)`; with the
    cluster's secret or with a read ticket (step 3 instead of step 1)."""

    def __init__(self, credential: BookieCredential, request_id: int = 0) -> None:
        self._ticket = credential if isinstance(credential, ReadTicket) else None
        self._secret = (BookieSecret(credential.key) if isinstance(credential, ReadTicket)
                        else credential)
        self._rid = request_id
        self._client_nonce = os.urandom(NONCE_BYTES)

    def hello(self) -> AuthRequest:
        if self._ticket is not None:
            return AuthRequest(self._rid, STEP_TICKET, self._client_nonce + self._ticket.body)
        return AuthRequest(self._rid, STEP_HELLO, self._client_nonce)

    def prove(self, response: AuthResponse) -> AuthRequest:
        """Check the bookie's proof in its step-1 answer; return step 2 (the client proof)."""
        _expect(response, STEP_TICKET if self._ticket is not None else STEP_HELLO)
        if len(response.payload) != NONCE_BYTES + PROOF_BYTES:
            raise BookieAuthError("the bookie's challenge has the wrong length")
        bookie_nonce, bookie_proof = response.payload[:NONCE_BYTES], response.payload[NONCE_BYTES:]
        expected = self._secret.proof(_BOOKIE_LABEL, self._client_nonce, bookie_nonce)
        if not hmac.compare_digest(expected, bookie_proof):
            raise BookieAuthError("the bookie could not prove the bookie secret (a different "
                                  "secret, or not a bookie of this cluster)")  # fmt: skip
        proof = self._secret.proof(_CLIENT_LABEL, self._client_nonce, bookie_nonce)
        return AuthRequest(self._rid, STEP_PROOF, proof)

    def finish(self, response: AuthResponse) -> None:
        _expect(response, STEP_PROOF)


def _expect(response: AuthResponse, step: int) -> None:
    if response.status is Status.BAD_REQUEST and step in (STEP_HELLO, STEP_TICKET):
        raise BookieAuthError("the bookie does not authenticate connections (no bookie secret "
                              "configured there)")  # fmt: skip
    if response.status is not Status.OK:
        raise BookieAuthError(f"the bookie refused authentication ({response.status.name})")
    if response.step != step:
        raise BookieAuthError(f"the bookie answered handshake step {response.step}, not {step}")


class BookieHandshake:
    """The bookie side of one connection: feed it AUTH requests, send back what it answers.

    `authenticated` turns True after a correct step 2; any answer that is not OK means the
    connection must be closed once that answer is sent. `scope` is the read ticket's scope
    when the peer authenticated with one (None: the cluster's secret, full access): the server
    must check every request against it (`TicketScope.allows`).
    """

    def __init__(self, secret: BookieSecret) -> None:
        self._secret = secret
        self._client_nonce: bytes | None = None
        self._bookie_nonce = os.urandom(NONCE_BYTES)
        self.authenticated = False
        self.scope: TicketScope | None = None
        self.refusal = ""  # why a ticket was refused (for the bookie's log line)

    def answer(self, request: AuthRequest) -> AuthResponse:
        rid = request.request_id
        if request.step == STEP_TICKET and self._client_nonce is None:
            if len(request.payload) <= NONCE_BYTES:
                return AuthResponse(rid, Status.UNAUTHORIZED, request.step)
            body = request.payload[NONCE_BYTES:]
            try:
                scope = decode_body(body)
            except TicketError as exc:
                self.refusal = str(exc)
                return AuthResponse(rid, Status.UNAUTHORIZED, request.step)
            if scope.expired():
                self.refusal = f"read ticket of User:{scope.principal} expired"
                return AuthResponse(rid, Status.UNAUTHORIZED, request.step)
            key = ticket_key(self._secret.key, body)
            assert len(key) == KEY_BYTES
            self._secret, self.scope = BookieSecret(key), scope
            self._client_nonce = request.payload[:NONCE_BYTES]
            proof = self._secret.proof(_BOOKIE_LABEL, self._client_nonce, self._bookie_nonce)
            return AuthResponse(rid, Status.OK, STEP_TICKET, self._bookie_nonce + proof)
        if request.step == STEP_HELLO and self._client_nonce is None:
            if len(request.payload) != NONCE_BYTES:
                return AuthResponse(rid, Status.UNAUTHORIZED, request.step)
            self._client_nonce = request.payload
            proof = self._secret.proof(_BOOKIE_LABEL, self._client_nonce, self._bookie_nonce)
            return AuthResponse(rid, Status.OK, STEP_HELLO, self._bookie_nonce + proof)
        if request.step == STEP_PROOF and self._client_nonce is not None:
            expected = self._secret.proof(_CLIENT_LABEL, self._client_nonce, self._bookie_nonce)
            if hmac.compare_digest(expected, request.payload):
                self.authenticated = True
                return AuthResponse(rid, Status.OK, STEP_PROOF)
        return AuthResponse(rid, Status.UNAUTHORIZED, request.step)


def refusal(request: Request, status: Status) -> Response:
    """The response to `request` that carries only `status` and no data: how a bookie refuses
    a request it will not run (UNAUTHORIZED before the handshake)."""
    rid = request.request_id
    if type(request) is AddEntryRequest:
        return AddEntryResponse(rid, status, request.ledger_id, request.entry_id)
    if type(request) is ReadEntryRequest:
        return ReadEntryResponse(rid, status, request.ledger_id, request.entry_id, -1)
    if type(request) is ReadEntriesRequest:
        return ReadEntriesResponse(rid, status, request.ledger_id, request.first_entry_id, -1)
    if type(request) is ReadLacRequest:
        return ReadLacResponse(rid, status, request.ledger_id, -1)
    if type(request) is WriteLacRequest:
        return WriteLacResponse(rid, status, request.ledger_id)
    if type(request) is BookieInfoRequest:
        return BookieInfoResponse(rid, status, 0, 0, False, "")
    if type(request) is AuthRequest:
        return AuthResponse(rid, status, request.step)
    raise TypeError(f"not a bookie protocol request: {type(request).__name__}")
