"""Sans-IO splitting of a Kafka byte stream into size-prefixed frames.

Every Kafka request and response is a big-endian int32 size followed by that many bytes.
`FrameReader` buffers what the socket gave it and hands back complete frames (without the
prefix).  It refuses a size prefix larger than `max_frame_bytes` (or negative) *before*
buffering the body, so an attacker cannot make us allocate memory by announcing a huge frame,
and it never hands out half a frame.

This module must never touch sockets, Trio or the schema table: bytes in, frames out.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLargeError, MalformedRequestError

_SIZE = struct.Struct(">i")
SIZE_PREFIX_BYTES = 4

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameReader:
    """Accumulates stream bytes; `feed` returns the frames completed so far, oldest first.

    After `FrameTooLargeError` (or a negative size, reported as `MalformedRequestError`) the
    reader is poisoned: the stream has lost its framing and the connection must be closed, so
    every further `feed` raises the same error.  The reader holds at most one partial frame
    (<= max_frame_bytes + 4) plus the bytes of the current `feed` call.
    """

    __slots__ = ("max_frame_bytes", "_buffer", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._error: MalformedRequestError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add `data` to the buffer and return every frame that is now complete."""
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        if len(buffer) < SIZE_PREFIX_BYTES <= len(buffer) + len(data):
            # Check the pending frame's size before its body joins the buffer.
            head = bytes(buffer) + bytes(data[: SIZE_PREFIX_BYTES - len(buffer)])
            self._check_size(_SIZE.unpack(head)[0])
        buffer += data
        frames: list[bytes] = []
        start = 0
        available = len(buffer)
        with memoryview(buffer) as view:  # one copy per frame; released before the trim below
            while available - start >= SIZE_PREFIX_BYTES:
                (size,) = _SIZE.unpack_from(view, start)
                if not 0 <= size <= self.max_frame_bytes:
                    break
                end = start + SIZE_PREFIX_BYTES + size
                if end > available:
                    break
                frames.append(bytes(view[start + SIZE_PREFIX_BYTES : end]))
                start = end
        if start:
            del buffer[:start]
        if len(buffer) >= SIZE_PREFIX_BYTES:
            self._check_size(_SIZE.unpack_from(buffer, 0)[0])
        return frames

    def _check_size(self, size: int) -> None:
        if 0 <= size <= self.max_frame_bytes:
            return
        # Keep nothing: the stream is no longer framed.
        self._buffer.clear()
        if size < 0:
            self._error = MalformedRequestError(f"negative frame size {size}")
        else:
            self._error = FrameTooLargeError(size, self.max_frame_bytes)
        raise self._error

    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean point to close the connection)."""
        return not self._buffer


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """`payload` with its 4-byte size prefix (for tests and tools; the codec frames itself)."""
    return _SIZE.pack(len(payload)) + bytes(payload)
