"""gRPC's message framing and status codes, as bytes in and bytes out.

On an HTTP/2 stream a gRPC message is a 5-byte prefix (a compressed flag and a big-endian
length) followed by the serialized protobuf.  `MessageReader` cuts a stream's DATA into
messages, refusing a length over its limit before any of the message is kept; compressed
messages are refused too, since this server never advertises a `grpc-accept-encoding` other
than identity.  The status codes are gRPC's own (grpc/doc/statuscodes.md), sent in the
`grpc-status` trailer.

This module never touches sockets or HTTP/2 frames.
"""

from __future__ import annotations

import struct
from enum import IntEnum

PREFIX = struct.Struct(">BI")
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024 + 1024  # a 4 MiB body plus its properties


class GrpcStatus(IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """A call ends with this status (and message) instead of a response."""

    def __init__(self, status: GrpcStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def frame(payload: bytes) -> bytes:
    """One uncompressed gRPC message."""
    return PREFIX.pack(0, len(payload)) + payload


class MessageReader:
    """Whole messages out of a stream's DATA, never more than `max_bytes` each."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self._max = max_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        out: list[bytes] = []
        while len(self._buffer) >= PREFIX.size:
            compressed, length = PREFIX.unpack_from(self._buffer)
            if compressed:
                raise GrpcError(GrpcStatus.UNIMPLEMENTED, "compressed messages are not accepted")
            if length > self._max:
                raise GrpcError(GrpcStatus.RESOURCE_EXHAUSTED,
                                f"message of {length} bytes exceeds {self._max}")
            end = PREFIX.size + length
            if len(self._buffer) < end:
                break
            out.append(bytes(self._buffer[PREFIX.size:end]))
            del self._buffer[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message still buffered."""
        return len(self._buffer)
