"""The bookie wire protocol: a sans-IO codec between ledger clients and bookies.

Bytes in, typed messages (messages.py) out; typed messages in, bytes out. This module never
touches a socket, a file, trio or the storage engine, so every byte layout here is testable
(and fuzzable) with plain bytes.

Frame layout (all integers big-endian)::

    u32 length            bytes that follow this field (version + op code + fields + body)
    u8  version           PROTOCOL_VERSION
    u8  op code           OpCode; responses are the request's op code | 0x80
    ... fixed fields      per op code, see the ``_*_FIELDS`` structs below
    ... body              the rest of the frame (entry bytes, or the bookie id in UTF-8)

READ_ENTRIES (BookKeeper 4.17's batch read) asks for up to ``max_entries`` consecutive entries
of at most ``max_bytes`` in all, starting at ``first_entry_id``; its answer carries as many as
the bookie serves and its own caps allow (at least the first when the status is OK), each as
``u32 length`` + bytes. A bookie that does not serve batch reads answers BAD_REQUEST.

A bookie configured with a secret first runs the AUTH handshake (``bookie/auth.py``): until it
succeeds, any other request is answered ``Status.UNAUTHORIZED`` and the connection is closed.

Request ids are u64 chosen by the client; a response carries the id of its request and
responses on one connection may arrive out of order. Ledger ids, entry ids and LACs are
signed 64-bit (``-1`` means "none"). Semantic checks (negative ledger ids, a read of entry
-1 without fence or long poll, ...) are the server's job and get ``Status.BAD_REQUEST``;
this codec rejects only what cannot be parsed (``ProtocolError``), after which the
connection must be closed.

Finding the frames in a byte stream is frame_decoder.py's (FrameDecoder).
"""

from __future__ import annotations

import struct
from typing import Final

from ledger_backend.bookie.messages import (
    REQUEST_TYPES,
    AddEntryRequest,
    AddEntryResponse,
    AuthRequest,
    AuthResponse,
    BookieAddress,
    BookieInfoRequest,
    BookieInfoResponse,
    FrameTooLargeError,
    Message,
    OpCode,
    ProtocolError,
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

# the messages (messages.py) are re-exported: callers import them from here or there
__all__ = [
    "AddEntryRequest",
    "AddEntryResponse",
    "AuthRequest",
    "AuthResponse",
    "BookieAddress",
    "BookieInfoRequest",
    "BookieInfoResponse",
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameTooLargeError",
    "MASTER_KEY_LENGTH",
    "Message",
    "OpCode",
    "PROTOCOL_VERSION",
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
    "decode_frame",
    "encode",
]

PROTOCOL_VERSION: Final = 1
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
_RESPONSE_BIT: Final = 0x80
_FLAG_SET: Final = 0x01
_FLAG_MASTER_KEY: Final = 0x02  # a 32-byte ledger master key follows the fixed fields
MASTER_KEY_LENGTH: Final = 32


# --- layouts ----------------------------------------------------------------------------

_MIN_FRAME_LENGTH: Final = 2  # version + op code

# fixed fields after the prefix
_ADD_REQ = struct.Struct(">QqqqB")  # request_id, ledger_id, entry_id, lac, flags(recovery)
_READ_REQ = struct.Struct(">QqqBqI")  # request_id, ledger, entry, flags(fence), wait_above, timeout
_LAC_REQ = struct.Struct(">Qq")  # request_id, ledger_id
_INFO_REQ = struct.Struct(">Q")  # request_id
_WLAC_REQ = struct.Struct(">Qqq")  # request_id, ledger_id, lac
_WLAC_RESP = struct.Struct(">QHq")  # request_id, status, ledger_id
_ADD_RESP = struct.Struct(">QHqq")  # request_id, status, ledger_id, entry_id
_READ_RESP = struct.Struct(">QHqqq")  # request_id, status, ledger_id, entry_id, lac
_LAC_RESP = struct.Struct(">QHqq")  # request_id, status, ledger_id, lac
_INFO_RESP = struct.Struct(">QHQQB")  # request_id, status, free, total, flags(read_only)
_AUTH_REQ = struct.Struct(">QB")  # request_id, step; payload follows
_AUTH_RESP = struct.Struct(">QHB")  # request_id, status, step; payload follows
_BATCH_REQ = struct.Struct(">QqqII")  # request_id, ledger_id, first entry, max entries, max bytes
_BATCH_RESP = struct.Struct(">QHqqqI")  # request_id, status, ledger, first entry, lac, count
_BODY_LENGTH = struct.Struct(">I")  # before each entry of a batch answer


def _frame_struct(fields: struct.Struct) -> struct.Struct:
    """Prefix (length, version, op code) + the op's fixed fields, packed in one call."""
    return struct.Struct(">IBB" + fields.format[1:])


_ADD_REQ_FRAME = _frame_struct(_ADD_REQ)
_READ_REQ_FRAME = _frame_struct(_READ_REQ)
_LAC_REQ_FRAME = _frame_struct(_LAC_REQ)
_INFO_REQ_FRAME = _frame_struct(_INFO_REQ)
_ADD_RESP_FRAME = _frame_struct(_ADD_RESP)
_READ_RESP_FRAME = _frame_struct(_READ_RESP)
_LAC_RESP_FRAME = _frame_struct(_LAC_RESP)
_INFO_RESP_FRAME = _frame_struct(_INFO_RESP)
_WLAC_REQ_FRAME = _frame_struct(_WLAC_REQ)
_WLAC_RESP_FRAME = _frame_struct(_WLAC_RESP)
_AUTH_REQ_FRAME = _frame_struct(_AUTH_REQ)
_AUTH_RESP_FRAME = _frame_struct(_AUTH_RESP)
_BATCH_REQ_FRAME = _frame_struct(_BATCH_REQ)
_BATCH_RESP_FRAME = _frame_struct(_BATCH_RESP)

_STATUS_BY_VALUE: Final = {s.value: s for s in Status}

_ADD_REQ_OP: Final = int(OpCode.ADD_ENTRY)
_READ_REQ_OP: Final = int(OpCode.READ_ENTRY)
_LAC_REQ_OP: Final = int(OpCode.READ_LAC)
_INFO_REQ_OP: Final = int(OpCode.BOOKIE_INFO)
_ADD_RESP_OP: Final = _ADD_REQ_OP | _RESPONSE_BIT
_READ_RESP_OP: Final = _READ_REQ_OP | _RESPONSE_BIT
_LAC_RESP_OP: Final = _LAC_REQ_OP | _RESPONSE_BIT
_INFO_RESP_OP: Final = _INFO_REQ_OP | _RESPONSE_BIT
_WLAC_REQ_OP: Final = int(OpCode.WRITE_LAC)
_WLAC_RESP_OP: Final = _WLAC_REQ_OP | _RESPONSE_BIT
_AUTH_REQ_OP: Final = int(OpCode.AUTH)
_AUTH_RESP_OP: Final = _AUTH_REQ_OP | _RESPONSE_BIT
_BATCH_REQ_OP: Final = int(OpCode.READ_ENTRIES)
_BATCH_RESP_OP: Final = _BATCH_REQ_OP | _RESPONSE_BIT

# --- encoding ---------------------------------------------------------------------------


def encode(msg: Message) -> bytes:
    """One complete frame (length prefix included) for ``msg``.

    Bodies are copied exactly once (header + body concatenation into the new frame).
    Raises ProtocolError if a field is out of its wire range.
    """
    try:
        if type(msg) is AddEntryRequest:
            body = msg.body
            key = _master_key(msg.master_key)
            return _ADD_REQ_FRAME.pack(
                _ADD_REQ_FRAME.size - 4 + len(key) + len(body), PROTOCOL_VERSION, _ADD_REQ_OP,
                msg.request_id, msg.ledger_id, msg.entry_id, msg.lac,
                (_FLAG_SET if msg.recovery else 0) | (_FLAG_MASTER_KEY if key else 0),
            ) + key + body  # fmt: skip
        if type(msg) is ReadEntryResponse:
            body = msg.body
            return _READ_RESP_FRAME.pack(
                _READ_RESP_FRAME.size - 4 + len(body), PROTOCOL_VERSION, _READ_RESP_OP,
                msg.request_id, msg.status, msg.ledger_id, msg.entry_id, msg.lac,
            ) + body  # fmt: skip
        if type(msg) is ReadEntriesResponse:
            return _encode_batch(msg)
        if type(msg) is ReadEntriesRequest:
            return _BATCH_REQ_FRAME.pack(
                _BATCH_REQ_FRAME.size - 4, PROTOCOL_VERSION, _BATCH_REQ_OP, msg.request_id,
                msg.ledger_id, msg.first_entry_id, msg.max_entries, msg.max_bytes,
            )  # fmt: skip
        if type(msg) is AddEntryResponse:
            return _ADD_RESP_FRAME.pack(
                _ADD_RESP_FRAME.size - 4, PROTOCOL_VERSION, _ADD_RESP_OP,
                msg.request_id, msg.status, msg.ledger_id, msg.entry_id,
            )  # fmt: skip
        if type(msg) is ReadEntryRequest:
            key = _master_key(msg.master_key)
            return _READ_REQ_FRAME.pack(
                _READ_REQ_FRAME.size - 4 + len(key), PROTOCOL_VERSION, _READ_REQ_OP,
                msg.request_id, msg.ledger_id, msg.entry_id,
                (_FLAG_SET if msg.fence else 0) | (_FLAG_MASTER_KEY if key else 0),
                msg.wait_for_lac_above, msg.timeout_ms,
            ) + key  # fmt: skip
        if type(msg) is ReadLacRequest:
            return _LAC_REQ_FRAME.pack(
                _LAC_REQ_FRAME.size - 4, PROTOCOL_VERSION, _LAC_REQ_OP,
                msg.request_id, msg.ledger_id,
            )  # fmt: skip
        if type(msg) is ReadLacResponse:
            return _LAC_RESP_FRAME.pack(
                _LAC_RESP_FRAME.size - 4, PROTOCOL_VERSION, _LAC_RESP_OP,
                msg.request_id, msg.status, msg.ledger_id, msg.lac,
            )  # fmt: skip
        if type(msg) is WriteLacRequest:
            return _WLAC_REQ_FRAME.pack(
                _WLAC_REQ_FRAME.size - 4, PROTOCOL_VERSION, _WLAC_REQ_OP,
                msg.request_id, msg.ledger_id, msg.lac,
            )  # fmt: skip
        if type(msg) is WriteLacResponse:
            return _WLAC_RESP_FRAME.pack(
                _WLAC_RESP_FRAME.size - 4, PROTOCOL_VERSION, _WLAC_RESP_OP,
                msg.request_id, msg.status, msg.ledger_id,
            )  # fmt: skip
        if type(msg) is BookieInfoRequest:
            return _INFO_REQ_FRAME.pack(
                _INFO_REQ_FRAME.size - 4, PROTOCOL_VERSION, _INFO_REQ_OP, msg.request_id
            )
        if type(msg) is BookieInfoResponse:
            bookie_id = msg.bookie_id.encode("utf-8")
            return _INFO_RESP_FRAME.pack(
                _INFO_RESP_FRAME.size - 4 + len(bookie_id), PROTOCOL_VERSION, _INFO_RESP_OP,
                msg.request_id, msg.status, msg.free_bytes, msg.total_bytes,
                _FLAG_SET if msg.read_only else 0,
            ) + bookie_id  # fmt: skip
        if type(msg) is AuthRequest:
            return _AUTH_REQ_FRAME.pack(
                _AUTH_REQ_FRAME.size - 4 + len(msg.payload), PROTOCOL_VERSION, _AUTH_REQ_OP,
                msg.request_id, msg.step,
            ) + msg.payload  # fmt: skip
        if type(msg) is AuthResponse:
            return _AUTH_RESP_FRAME.pack(
                _AUTH_RESP_FRAME.size - 4 + len(msg.payload), PROTOCOL_VERSION, _AUTH_RESP_OP,
                msg.request_id, msg.status, msg.step,
            ) + msg.payload  # fmt: skip
    except struct.error as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc
    raise ProtocolError(f"not a bookie protocol message: {type(msg).__name__}")


def _encode_batch(msg: ReadEntriesResponse) -> bytes:
    """A batch answer in one join: header, then length + bytes of each entry."""
    bodies = msg.bodies
    size = sum(len(b) for b in bodies) + _BODY_LENGTH.size * len(bodies)
    parts: list[bytes | memoryview] = [_BATCH_RESP_FRAME.pack(
        _BATCH_RESP_FRAME.size - 4 + size, PROTOCOL_VERSION, _BATCH_RESP_OP, msg.request_id,
        msg.status, msg.ledger_id, msg.first_entry_id, msg.lac, len(bodies),
    )]  # fmt: skip
    pack = _BODY_LENGTH.pack
    for body in bodies:
        parts.append(pack(len(body)))
        parts.append(body)
    return b"".join(parts)


def _decode_batch(fields: memoryview, op: int) -> ReadEntriesResponse:
    """The entries are views of `fields` (no copies): its buffer must never change after."""
    rid, status, ledger, first, lac, count = _at_least(_BATCH_RESP, fields, op)
    pos = _BATCH_RESP.size
    end = len(fields)
    # every entry needs its 4-byte length: a count the frame cannot hold is refused before
    # anything is allocated for it
    if count * _BODY_LENGTH.size > end - pos:
        raise ProtocolError(f"op {op:#04x}: {count} entries cannot fit in {end - pos} bytes")
    bodies: list[bytes | memoryview] = []
    unpack = _BODY_LENGTH.unpack_from
    for _ in range(count):
        if end - pos < _BODY_LENGTH.size:
            raise ProtocolError(f"op {op:#04x}: entry {len(bodies)} has no length")
        (length,) = unpack(fields, pos)
        pos += _BODY_LENGTH.size
        if length > end - pos:
            raise ProtocolError(f"op {op:#04x}: entry {len(bodies)} of {length} bytes overruns "
                                f"the frame")  # fmt: skip
        bodies.append(fields[pos : pos + length])
        pos += length
    if pos != end:
        raise ProtocolError(f"op {op:#04x}: {end - pos} bytes after the last entry")
    return ReadEntriesResponse(rid, _status(status), ledger, first, lac, tuple(bodies))


# --- decoding ---------------------------------------------------------------------------


def _master_key(key: bytes) -> bytes:
    if key and len(key) != MASTER_KEY_LENGTH:
        raise ProtocolError(f"a master key has {MASTER_KEY_LENGTH} bytes, not {len(key)}")
    return key


def _flags(value: int, what: str) -> tuple[bool, bool]:
    """(the op's own flag, master key present) from a flags byte."""
    if value & ~(_FLAG_SET | _FLAG_MASTER_KEY):
        raise ProtocolError(f"unknown {what} flag bits {value:#04x}")
    return bool(value & _FLAG_SET), bool(value & _FLAG_MASTER_KEY)


def _status(value: int) -> Status:
    try:
        return _STATUS_BY_VALUE[value]
    except KeyError:
        raise ProtocolError(f"unknown status {value}") from None


def _flag(value: int, what: str) -> bool:
    if value & ~_FLAG_SET:
        raise ProtocolError(f"unknown {what} flag bits {value:#04x}")
    return bool(value)


def _exact(layout: struct.Struct, payload: memoryview, op: int) -> tuple[int, ...]:
    if len(payload) != layout.size:
        raise ProtocolError(f"op {op:#04x}: {len(payload)} field bytes, expected {layout.size}")
    return layout.unpack_from(payload)


def _at_least(layout: struct.Struct, payload: memoryview, op: int) -> tuple[int, ...]:
    if len(payload) < layout.size:
        raise ProtocolError(f"op {op:#04x}: {len(payload)} bytes, need >= {layout.size}")
    return layout.unpack_from(payload)


def decode_frame(frame: bytes | bytearray | memoryview) -> Message:
    """Decode one frame WITHOUT its 4-byte length prefix (version byte first)."""
    payload = memoryview(frame)
    if len(payload) < _MIN_FRAME_LENGTH:
        raise ProtocolError(f"frame of {len(payload)} bytes is too short")
    version = payload[0]
    op = payload[1]
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unsupported protocol version {version}")
    fields = payload[2:]
    if op == _ADD_REQ_OP:
        rid, ledger, entry, lac, flags = _at_least(_ADD_REQ, fields, op)
        recovery, keyed = _flags(flags, "recovery")
        start = _ADD_REQ.size + (MASTER_KEY_LENGTH if keyed else 0)
        if len(fields) < start:
            raise ProtocolError(f"op {op:#04x}: master key flagged but missing")
        key = bytes(fields[_ADD_REQ.size : start])
        return AddEntryRequest(rid, ledger, entry, lac, recovery, bytes(fields[start:]), key)
    if op == _ADD_RESP_OP:
        rid, status, ledger, entry = _exact(_ADD_RESP, fields, op)
        return AddEntryResponse(rid, _status(status), ledger, entry)
    if op == _READ_REQ_OP:
        rid, ledger, entry, flags, wait_above, timeout_ms = _at_least(_READ_REQ, fields, op)
        fence, keyed = _flags(flags, "fence")
        if len(fields) != _READ_REQ.size + (MASTER_KEY_LENGTH if keyed else 0):
            raise ProtocolError(f"op {op:#04x}: {len(fields)} field bytes")
        key = bytes(fields[_READ_REQ.size :])
        return ReadEntryRequest(rid, ledger, entry, fence, wait_above, timeout_ms, key)
    if op == _READ_RESP_OP:
        rid, status, ledger, entry, lac = _at_least(_READ_RESP, fields, op)
        return ReadEntryResponse(
            rid, _status(status), ledger, entry, lac, bytes(fields[_READ_RESP.size :])
        )
    if op == _LAC_REQ_OP:
        rid, ledger = _exact(_LAC_REQ, fields, op)
        return ReadLacRequest(rid, ledger)
    if op == _LAC_RESP_OP:
        rid, status, ledger, lac = _exact(_LAC_RESP, fields, op)
        return ReadLacResponse(rid, _status(status), ledger, lac)
    if op == _WLAC_REQ_OP:
        rid, ledger, lac = _exact(_WLAC_REQ, fields, op)
        return WriteLacRequest(rid, ledger, lac)
    if op == _WLAC_RESP_OP:
        rid, status, ledger = _exact(_WLAC_RESP, fields, op)
        return WriteLacResponse(rid, _status(status), ledger)
    if op == _INFO_REQ_OP:
        (rid,) = _exact(_INFO_REQ, fields, op)
        return BookieInfoRequest(rid)
    if op == _INFO_RESP_OP:
        rid, status, free, total, flags = _at_least(_INFO_RESP, fields, op)
        try:
            bookie_id = str(fields[_INFO_RESP.size :], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"bookie id is not UTF-8: {exc}") from None
        return BookieInfoResponse(
            rid, _status(status), free, total, _flag(flags, "read-only"), bookie_id
        )
    if op == _BATCH_RESP_OP:
        return _decode_batch(fields, op)
    if op == _BATCH_REQ_OP:
        return ReadEntriesRequest(*_exact(_BATCH_REQ, fields, op))
    if op == _AUTH_REQ_OP:
        rid, step = _at_least(_AUTH_REQ, fields, op)
        return AuthRequest(rid, step, bytes(fields[_AUTH_REQ.size :]))
    if op == _AUTH_RESP_OP:
        rid, status, step = _at_least(_AUTH_RESP, fields, op)
        return AuthResponse(rid, _status(status), step, bytes(fields[_AUTH_RESP.size :]))
    raise ProtocolError(f"unknown op code {op:#04x}")
