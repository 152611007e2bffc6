"""The bookie wire protocol's vocabulary: statuses, op codes, request and response messages.

Plain frozen dataclasses, one per request and response of the bookie protocol, the Status and
OpCode enums, the protocol's error root, and BookieAddress (a bookie's "host:port"). The byte
layouts and the frame reader are protocol.py, which re-exports every name here, so callers
import from either.

This module must never know a byte layout, touch a socket, or import anything of the bookie
beyond the standard library.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

__all__ = [
    "AddEntryRequest",
    "AddEntryResponse",
    "AuthRequest",
    "AuthResponse",
    "BookieAddress",
    "BookieInfoRequest",
    "BookieInfoResponse",
    "FrameTooLargeError",
    "Message",
    "OpCode",
    "ProtocolError",
    "REQUEST_TYPES",
    "ReadEntriesRequest",
    "ReadEntriesResponse",
    "ReadEntryRequest",
    "ReadEntryResponse",
    "ReadLacRequest",
    "ReadLacResponse",
    "Request",
    "Response",
    "Status",
    "WriteLacRequest",
    "WriteLacResponse",
]


class ProtocolError(Exception):
    """The byte stream or a message cannot be encoded/decoded; close the connection."""


class FrameTooLargeError(ProtocolError):
    """A frame announced a length above the decoder's limit (refused before buffering)."""


class Status(enum.IntEnum):
    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    READ_ONLY = 4
    BAD_REQUEST = 5
    TIMEOUT = 6
    INTERNAL_ERROR = 7
    UNAUTHORIZED = 8


class OpCode(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    READ_LAC = 3
    BOOKIE_INFO = 4
    WRITE_LAC = 5
    AUTH = 6
    READ_ENTRIES = 7


# --- messages -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddEntryRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    lac: int
    recovery: bool
    body: bytes
    master_key: bytes = b""  # the ledger's master key (bookie/master_key.py), or none


@dataclass(frozen=True, slots=True)
class ReadEntryRequest:
    """Read one entry. fence=True fences the ledger first (entry_id -1: fence only).

    wait_for_lac_above >= 0 makes it a long poll: wait up to timeout_ms until the bookie's
    LAC exceeds it, then read entry_id (-1: return only the LAC), else Status.TIMEOUT.
    """

    request_id: int
    ledger_id: int
    entry_id: int
    fence: bool = False
    wait_for_lac_above: int = -1
    timeout_ms: int = 0
    master_key: bytes = b""  # checked when fencing (bookie/master_key.py)


@dataclass(frozen=True, slots=True)
class ReadEntriesRequest:
    """Batch read: entries first_entry_id.. (consecutive), at most max_entries of them and
    max_bytes in all; the bookie may answer fewer (its own caps, an entry it lacks), never 0
    with Status.OK. No fencing, no long poll: those stay single-entry reads."""

    request_id: int
    ledger_id: int
    first_entry_id: int
    max_entries: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReadEntriesResponse:
    """Entries first_entry_id, first_entry_id + 1, ... (stored bytes, digests unchecked)."""

    request_id: int
    status: Status
    ledger_id: int
    first_entry_id: int
    lac: int
    bodies: tuple[bytes | memoryview, ...] = ()  # decoded: views of the frame


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    request_id: int
    ledger_id: int


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """The writer's LAC, sent when adds pause (BookKeeper's explicit LAC), so readers of an
    open ledger see its last entry without waiting for the next add to piggyback it."""

    request_id: int
    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class BookieInfoRequest:
    request_id: int


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """One step of the connection handshake (see bookie/auth.py): step 1 carries the client's
    nonce, step 2 its proof."""

    request_id: int
    step: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """The bookie's answer to one handshake step (step 1: its nonce and proof)."""

    request_id: int
    status: Status
    step: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class AddEntryResponse:
    request_id: int
    status: Status
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class ReadEntryResponse:
    request_id: int
    status: Status
    ledger_id: int
    entry_id: int
    lac: int
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    request_id: int
    status: Status
    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    request_id: int
    status: Status
    ledger_id: int


@dataclass(frozen=True, slots=True)
class BookieInfoResponse:
    request_id: int
    status: Status
    free_bytes: int
    total_bytes: int
    read_only: bool
    bookie_id: str


Request = (AddEntryRequest | ReadEntryRequest | ReadLacRequest | WriteLacRequest
           | BookieInfoRequest | AuthRequest | ReadEntriesRequest)
Response = (AddEntryResponse | ReadEntryResponse | ReadLacResponse | WriteLacResponse
            | BookieInfoResponse | AuthResponse | ReadEntriesResponse)
REQUEST_TYPES: Final = (AddEntryRequest, ReadEntryRequest, ReadLacRequest, WriteLacRequest,
                        BookieInfoRequest, AuthRequest, ReadEntriesRequest)
Message = Request | Response


@dataclass(frozen=True, slots=True)
class BookieAddress:
    """Where a bookie listens; ``str()`` is the "host:port" form used in ledger metadata."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> BookieAddress:
        """Inverse of str(): "host:port" or "[v6-host]:port"."""
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"not a bookie address (host:port): {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(host, int(port_text))
