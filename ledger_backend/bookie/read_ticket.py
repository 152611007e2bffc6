"""Read tickets: a scoped, expiring credential that lets its holder only read named ledgers.

A Spark job's executors read ledgers straight from the bookies. They must not carry the
cluster's bookie secret (whoever holds it reads, writes and fences everything) nor the job's
Kafka password. A broker, which holds the secret and checks the principal's ACLs, issues a
ticket instead, in the spirit of Kafka's delegation tokens (KIP-48)::

    body = magic "LWRT" | version 1 | expires (ms since the epoch, u64)
           | principal (u16 length + UTF-8) | ledger count (u32) | ledger ids (u64 each)
    key  = HMAC-SHA256(HMAC-SHA256(bookie secret, TICKET_LABEL), body)

The holder gets body and key. On a new bookie connection it sends AUTH step 3 (client nonce +
body); the bookie checks the body (format, not expired), derives the key itself from its
secret, and the handshake goes on exactly as with the secret (bookie/auth.py) with the key in
the secret's place: both sides prove the key with fresh nonces, so the key never crosses the
wire. The connection is then limited to the ticket's `TicketScope`: ReadEntry without fencing
and ReadLac, of the listed ledgers only, until the expiry; every other request is refused.

A ticket is a bearer credential until it expires (as a delegation token is): keep it out of
logs. This module is sans-IO: it must never log, compare MACs with ``==``, or show a key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time
from dataclasses import dataclass, field
from typing import Final

from ledger_backend.bookie.protocol import ReadEntriesRequest, ReadEntryRequest, ReadLacRequest

TICKET_LABEL: Final = b"ledgerwire bookie read ticket v1"
_MAGIC: Final = b"LWRT"
_VERSION: Final = 1
_HEAD = struct.Struct(">4sBQH")
_COUNT = struct.Struct(">I")
KEY_BYTES: Final = 32
# an AUTH frame before authentication stays small (bookie/auth.py): this bounds a ticket
MAX_TICKET_LEDGERS: Final = 7_000
MAX_PRINCIPAL_BYTES: Final = 256


class TicketError(ValueError):
    """A malformed, expired or over-large ticket."""


@dataclass(frozen=True)
class TicketScope:
    """What a ticket allows: reads of `ledgers` until `expires_ms`, on behalf of `principal`."""

    principal: str
    expires_ms: int
    ledgers: frozenset[int]

    def expired(self, now_ms: int | None = None) -> bool:
        return (now_ms if now_ms is not None else int(time.time() * 1000)) >= self.expires_ms

    def allows(self, request: object, now_ms: int | None = None) -> bool:
        """True for a non-fencing ReadEntry, a batch read (ReadEntries, never fencing) or a
        ReadLac of a listed ledger before expiry."""
        if self.expired(now_ms):
            return False
        if type(request) is ReadEntryRequest:
            return not request.fence and request.ledger_id in self.ledgers
        if type(request) is ReadLacRequest or type(request) is ReadEntriesRequest:
            return request.ledger_id in self.ledgers
        return False


def encode_body(scope: TicketScope) -> bytes:
    principal = scope.principal.encode("utf-8")
    if len(principal) > MAX_PRINCIPAL_BYTES:
        raise TicketError("the principal's name is too long for a ticket")
    if len(scope.ledgers) > MAX_TICKET_LEDGERS:
        raise TicketError(f"a ticket names at most {MAX_TICKET_LEDGERS} ledgers "
                          f"({len(scope.ledgers)} asked)")  # fmt: skip
    ledgers = sorted(scope.ledgers)
    return b"".join((_HEAD.pack(_MAGIC, _VERSION, scope.expires_ms, len(principal)), principal,
                     _COUNT.pack(len(ledgers)), struct.pack(f">{len(ledgers)}Q", *ledgers)))


def decode_body(body: bytes) -> TicketScope:
    """The scope a body states; TicketError if it is malformed (not if it is expired)."""
    try:
        magic, version, expires_ms, name_len = _HEAD.unpack_from(body, 0)
        at = _HEAD.size
        principal = body[at:at + name_len].decode("utf-8")
        at += name_len
        (count,) = _COUNT.unpack_from(body, at)
        at += _COUNT.size
    except (struct.error, UnicodeDecodeError):
        raise TicketError("malformed ticket") from None
    if magic != _MAGIC or version != _VERSION:
        raise TicketError("not a version-1 ledgerwire read ticket")
    if count > MAX_TICKET_LEDGERS or len(body) != at + 8 * count:
        raise TicketError("malformed ticket (ledger list)")
    return TicketScope(principal, expires_ms, frozenset(struct.unpack_from(f">{count}Q", body, at)))


def _ticket_master(secret_key: bytes) -> bytes:
    return hmac.new(secret_key, TICKET_LABEL, hashlib.sha256).digest()


def ticket_key(secret_key: bytes, body: bytes) -> bytes:
    """The key of ticket `body` under the cluster's bookie secret (raw bytes)."""
    return hmac.new(_ticket_master(secret_key), body, hashlib.sha256).digest()


@dataclass(frozen=True)
class ReadTicket:
    """A ticket as its holder keeps it: the body, and the key that proves it (never shown)."""

    body: bytes
    key: bytes = field(repr=False)

    @property
    def scope(self) -> TicketScope:
        return decode_body(self.body)

    def encode(self) -> str:
        """One printable string (for a Spark option or an HTTP answer)."""
        return base64.urlsafe_b64encode(self.key + self.body).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> ReadTicket:
        try:
            raw = base64.urlsafe_b64decode(text.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise TicketError("malformed ticket (not base64)") from None
        if len(raw) <= KEY_BYTES:
            raise TicketError("malformed ticket (too short)")
        ticket = cls(raw[KEY_BYTES:], raw[:KEY_BYTES])
        decode_body(ticket.body)  # refuse a malformed body here, not at the first bookie
        return ticket


def issue_ticket(secret_key: bytes, principal: str, ledgers: frozenset[int] | set[int],
                 ttl_s: float, now_ms: int | None = None) -> ReadTicket:  # fmt: skip
    """A ticket for `principal` to read `ledgers` for ttl_s seconds (the caller has checked
    that the principal may read them)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    body = encode_body(TicketScope(principal, now + int(ttl_s * 1000), frozenset(ledgers)))
    return ReadTicket(body, ticket_key(secret_key, body))


__all__ = ["MAX_TICKET_LEDGERS", "ReadTicket", "TicketError", "TicketScope", "decode_body",
           "issue_ticket", "ticket_key"]
