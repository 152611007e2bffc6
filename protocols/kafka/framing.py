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

    Whole frames are sliced straight out of the fed chunk (one copy each).  A frame split
    across chunks is kept as a list of its pieces and joined once when complete; pieces of
    immutable `bytes` chunks are kept as views (no copy), other pieces are copied.
    """

    __slots__ = ("max_frame_bytes", "_head", "_pieces", "_size", "_missing", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._head = bytearray()  # a size prefix not yet complete (< 4 bytes)
        self._pieces: list[bytes | memoryview] = []  # the pending frame's body so far
        self._size = -1  # the pending frame's body size (-1: no frame pending)
        self._missing = 0  # body bytes the pending frame still lacks
        self._error: MalformedRequestError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        if self._size < 0:
            return len(self._head)
        return SIZE_PREFIX_BYTES + self._size - self._missing

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add `data` to the buffer and return every frame that is now complete."""
        if self._error is not None:
            raise self._error
        frames: list[bytes] = []
        keep_views = type(data) is bytes
        with memoryview(data) as view:
            if view.ndim != 1 or view.itemsize != 1:
                view = view.cast("B")
            available = len(view)
            start = 0
            if self._head or self._size >= 0:
                start = self._continue_pending(view, frames, keep_views)
                if start < 0:
                    return frames  # all of `data` went into the pending frame
            unpack_from = _SIZE.unpack_from
            max_frame_bytes = self.max_frame_bytes
            while available - start >= SIZE_PREFIX_BYTES:
                (size,) = unpack_from(view, start)
                if not 0 <= size <= max_frame_bytes:
                    self._check_size(size)  # raises
                end = start + SIZE_PREFIX_BYTES + size
                if end > available:
                    # Its size is known and fine: keep what has arrived of its body.
                    body = view[start + SIZE_PREFIX_BYTES :]
                    self._pieces.append(body if keep_views else bytes(body))
                    self._size = size
                    self._missing = end - available
                    return frames
                frames.append(bytes(view[start + SIZE_PREFIX_BYTES : end]))
                start = end
            if start < available:
                self._head += view[start:]
        return frames

    def _continue_pending(self, view: memoryview, frames: list[bytes], keep_views: bool) -> int:
        """Feed the pending frame from `view`; where `view` continues (-1: all was used)."""
        start = 0
        if self._size < 0:  # the size prefix itself is incomplete
            head = self._head
            start = min(SIZE_PREFIX_BYTES - len(head), len(view))
            head += view[:start]
            if len(head) < SIZE_PREFIX_BYTES:
                return -1
            # Check the pending frame's size before any of its body is kept.
            (size,) = _SIZE.unpack_from(head, 0)
            self._check_size(size)
            head.clear()
            self._size = self._missing = size
        missing = self._missing
        if len(view) - start < missing:
            piece = view[start:]
            self._pieces.append(piece if keep_views else bytes(piece))
            self._missing = missing - len(piece)
            return -1
        end = start + missing
        pieces = self._pieces
        if pieces:
            pieces.append(view[start:end])
            frames.append(b"".join(pieces))
        else:
            frames.append(bytes(view[start:end]))
        self._pieces = []
        self._size = -1
        self._missing = 0
        return end

    def _check_size(self, size: int) -> None:
        if 0 <= size <= self.max_frame_bytes:
            return
        # Keep nothing: the stream is no longer framed.
        self._head.clear()
        self._pieces = []
        self._size = -1
        self._missing = 0
        if size < 0:
            self._error = MalformedRequestError(f"negative frame size {size}")
        else:
            self._error = FrameTooLargeError(size, self.max_frame_bytes)
        raise self._error

    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean point to close the connection)."""
        return not self._head and self._size < 0


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """`payload` with its 4-byte size prefix (for tests and tools; the codec frames itself)."""
    return _SIZE.pack(len(payload)) + bytes(payload)
