"""Reading bookie frames off a byte stream: FrameDecoder, sans-IO like the codec it feeds.

protocol.py encodes and decodes one frame; this module finds the frames in whatever a socket
gave (checking each length before its body is buffered, gathering a large frame in a buffer of
its own) and hands each to ``protocol.decode_frame``.
"""

from __future__ import annotations

import struct
from typing import Final, Literal

from ledger_backend.bookie.messages import REQUEST_TYPES, FrameTooLargeError, Message, ProtocolError
from ledger_backend.bookie.protocol import (
    _BATCH_RESP_OP,
    _MIN_FRAME_LENGTH,
    DEFAULT_MAX_FRAME_BYTES,
    decode_frame,
)

__all__ = ["AcceptKind", "FrameDecoder", "LARGE_FRAME_BYTES"]


# FrameDecoder gathers a frame at least this long in a buffer of its own (see its __init__)
LARGE_FRAME_BYTES: Final = 256 * 1024
_LENGTH = struct.Struct(">I")


AcceptKind = Literal["any", "requests", "responses"]


class FrameDecoder:
    """Incremental frame reader: feed it whatever the socket gave, get whole messages.

    The length field is checked as soon as its 4 bytes are in, so an oversize frame is
    refused before its body is buffered. Bytes of an incomplete frame stay buffered until
    the rest arrives. After a ProtocolError the decoder is poisoned: every later feed()
    raises again (the connection must be closed).

    ``accept`` narrows what is legal on this stream: a bookie accepts only requests, a
    client only responses.
    """

    __slots__ = ("_buffer", "_max_frame_bytes", "_accept_requests", "_accept_responses",
                 "_error", "_frame", "_filled", "_large")  # fmt: skip

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, accept: AcceptKind = "any",
        large_frame_bytes: int | None = None,
    ) -> None:
        if max_frame_bytes < _MIN_FRAME_LENGTH:
            raise ValueError(f"max_frame_bytes must be >= {_MIN_FRAME_LENGTH}")
        if accept not in ("any", "requests", "responses"):
            raise ValueError(f"accept must be 'any', 'requests' or 'responses', not {accept!r}")
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes
        self._accept_requests = accept != "responses"
        self._accept_responses = accept != "requests"
        self._error: ProtocolError | None = None
        # A frame of at least `large_frame_bytes` (LARGE_FRAME_BYTES on a client's response
        # stream; never by default on a bookie's, which allocates only what has arrived) is
        # gathered in a buffer of its own exact size (`_filled` bytes of it so far), never in
        # `_buffer`: no regrowth copies, its rest may be received straight into it
        # (`receive_buffer`), and a batch answer's entries are views of it, not copies.
        self._frame: bytearray | None = None
        self._filled = 0
        if large_frame_bytes is None:
            large_frame_bytes = LARGE_FRAME_BYTES if accept == "responses" else 0
        self._large = large_frame_bytes

    @property
    def max_frame_bytes(self) -> int:
        """The frame length limit; a bookie raises it once a connection has authenticated."""
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        if value < _MIN_FRAME_LENGTH:
            raise ValueError(f"max_frame_bytes must be >= {_MIN_FRAME_LENGTH}")
        self._max_frame_bytes = value

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame waiting for the rest (0 at a frame boundary)."""
        return self._filled if self._frame is not None else len(self._buffer)

    @property
    def missing_bytes(self) -> int:
        """Bytes still to come of the frame being buffered (0 unless its length is known):
        a reader may receive that much at once (a batch answer is megabytes)."""
        if self._frame is not None:
            return len(self._frame) - self._filled
        buf = self._buffer
        if len(buf) < 4:
            return 0
        (length,) = _LENGTH.unpack_from(buf)
        return max(0, min(length, self._max_frame_bytes) + 4 - len(buf))

    def receive_buffer(self) -> memoryview | None:
        """Where the rest of a large frame may be received directly (a socket's recv_into),
        then handed over with `received(n)`; None while no large frame is being gathered."""
        if self._frame is None or self._error is not None:
            return None
        return memoryview(self._frame)[self._filled :]

    def received(self, count: int) -> list[Message]:
        """`count` bytes were written into `receive_buffer()`: the messages now complete."""
        if self._error is not None:
            raise self._error
        if self._frame is None or not 0 <= count <= len(self._frame) - self._filled:
            raise ValueError(f"{count} bytes were not received into the frame buffer")
        self._filled += count
        messages: list[Message] = []
        self._finish_large_frame(messages)
        return messages

    def _finish_large_frame(self, messages: list[Message]) -> None:
        frame = self._frame
        if frame is None or self._filled < len(frame):
            return
        self._frame, self._filled = None, 0
        try:
            msg = decode_frame(memoryview(frame)[4:])
            self._check_direction(msg)
        except ProtocolError as exc:
            self._error = exc
            raise
        messages.append(msg)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        if self._error is not None:
            raise self._error
        messages: list[Message] = []
        frame = self._frame
        if frame is not None:  # the next bytes of a large frame go straight to its buffer
            data = memoryview(data)
            take = min(len(frame) - self._filled, len(data))
            frame[self._filled : self._filled + take] = data[:take]
            self._filled += take
            self._finish_large_frame(messages)
            if take == len(data):
                return messages
            data = data[take:]
        buf = self._buffer
        buf += data
        pos = 0
        end = len(buf)
        try:
            with memoryview(buf) as view:
                while end - pos >= 4:
                    (length,) = _LENGTH.unpack_from(view, pos)
                    if length > self._max_frame_bytes:
                        raise FrameTooLargeError(
                            f"frame of {length} bytes exceeds the limit of "
                            f"{self._max_frame_bytes} bytes"
                        )
                    if length < _MIN_FRAME_LENGTH:
                        raise ProtocolError(f"frame length {length} is too short")
                    frame_end = pos + 4 + length
                    if frame_end > end:
                        if 0 < self._large <= length + 4:  # gather it in its own buffer
                            self._frame = bytearray(length + 4)
                            self._frame[: end - pos] = view[pos:end]
                            self._filled = end - pos
                            pos = end
                        break
                    if view[pos + 5] == _BATCH_RESP_OP:
                        # its entries are views of the frame: of a copy, not of `buf`, which
                        # is trimmed below
                        msg = decode_frame(bytes(view[pos + 4 : frame_end]))
                    else:
                        msg = decode_frame(view[pos + 4 : frame_end])
                    self._check_direction(msg)
                    messages.append(msg)
                    pos = frame_end
        except ProtocolError as exc:
            self._error = exc
            self._buffer = bytearray()
            raise
        if pos:
            del buf[:pos]  # bytearray trims its front in O(1)
        return messages

    def _check_direction(self, msg: Message) -> None:
        is_request = isinstance(msg, REQUEST_TYPES)
        if is_request and not self._accept_requests:
            raise ProtocolError(f"unexpected request {type(msg).__name__} on a response stream")
        if not is_request and not self._accept_responses:
            raise ProtocolError(f"unexpected response {type(msg).__name__} on a request stream")
