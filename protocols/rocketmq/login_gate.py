"""Bounded memory before a RocketMQ 4.x connection has proved who it is (sans-IO).

RocketMQ has no login: every request carries its own AccessKey and Signature (an HMAC over its
header fields and its body).  On a broker that requires signed requests a connection is
therefore "logged in" once one of its requests has been authenticated, and until then it is
read by `PreAuthReader`, header first, one frame at a time:

1. the 8-byte prefix (frame length, header length): a frame over `max_frame_bytes` (default one
   largest message, 4 MiB, plus 64 KiB of header) or a header over `max_header_bytes` (64 KiB)
   is refused before either is read;
2. the header alone (`HeaderArrived`): the caller refuses it when it names no account that
   could sign it (no AccessKey, an unknown one) and calls `skip_body()`: the body of an
   anonymous client is then dropped as it arrives, never held;
3. the whole frame (`FrameArrived`): the caller checks the signature and, when it holds,
   serves it and reads the rest of the connection normally (`rest()` hands over what was
   read past that frame).

The reader asks for no more than its current step needs (`wanted`), so with reads of at most
R bytes it holds at most max(prefix + header, frame) + R bytes.  A deadline for the whole
login is the caller's (the listener's `pre_auth_timeout_s`).

This module never touches sockets or Trio, and never decides who may do what: the guard
(`access.RocketMQGuard`) does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocols.rocketmq.codec import RemotingCommand, decode_command
from protocols.rocketmq.errors import FrameTooLargeError, MalformedFrameError

PRE_AUTH_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_PRE_AUTH_MAX_FRAME_BYTES = 4 * 1024 * 1024 + PRE_AUTH_MAX_HEADER_BYTES
DEFAULT_PRE_AUTH_TIMEOUT_S = 10.0
_PREFIX = struct.Struct(">iI")  # frame length (excluding itself), serialize type | header length


@dataclass(frozen=True)
class HeaderArrived:
    """The header of the next frame, decoded with an empty body."""

    command: RemotingCommand


@dataclass(frozen=True)
class FrameArrived:
    command: RemotingCommand


PreAuthEvent = HeaderArrived | FrameArrived


class PreAuthReader:
    """Frames of a connection that has not been authenticated yet: header first, then body."""

    def __init__(self, max_frame_bytes: int = DEFAULT_PRE_AUTH_MAX_FRAME_BYTES,
                 max_header_bytes: int = PRE_AUTH_MAX_HEADER_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_header_bytes = max_header_bytes
        self._buffer = bytearray()
        self._frame_length = -1  # known once the prefix is read
        self._header_length = -1
        self._header_given = False
        self._skipping = 0  # body bytes still to drop (a refused header's)

    def feed(self, data: bytes) -> None:
        if self._skipping:
            dropped = min(self._skipping, len(data))
            self._skipping -= dropped
            data = data[dropped:]
        self._buffer += data

    def skip_body(self) -> None:
        """Drop the body of the frame whose header was just given, as it arrives."""
        assert self._header_given, "skip_body() follows a HeaderArrived"
        end = 4 + self._frame_length
        here = min(end, len(self._buffer))
        self._skipping = end - here
        del self._buffer[:here]
        self._frame_length = self._header_length = -1
        self._header_given = False

    @property
    def wanted(self) -> int:
        """How many more bytes the current step needs (at least 1)."""
        if self._skipping:
            return self._skipping
        if self._frame_length < 0:
            need = _PREFIX.size
        elif not self._header_given:
            need = _PREFIX.size + self._header_length
        else:
            need = 4 + self._frame_length
        return max(1, need - len(self._buffer))

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next_event(self) -> PreAuthEvent | None:
        """The next step's event, or None while more bytes are needed; raises
        FrameTooLargeError / MalformedFrameError (close the connection)."""
        buf = self._buffer
        if self._frame_length < 0:
            if len(buf) < _PREFIX.size:
                return None
            length, word = _PREFIX.unpack_from(buf, 0)
            header_length = word & 0xFFFFFF
            if length < 4:
                raise MalformedFrameError(f"frame length {length} is below the minimum of 4")
            if length > self.max_frame_bytes:
                raise FrameTooLargeError(f"frame of {length} bytes before authentication "
                                         f"exceeds the limit of {self.max_frame_bytes}")
            if header_length > self.max_header_bytes:
                raise FrameTooLargeError(f"header of {header_length} bytes before "
                                         f"authentication exceeds {self.max_header_bytes}")
            if header_length > length - 4:
                raise MalformedFrameError(f"header length {header_length} runs past the "
                                          f"frame of {length} bytes")
            self._frame_length, self._header_length = length, header_length
        if not self._header_given:
            end = _PREFIX.size + self._header_length
            if len(buf) < end:
                return None
            self._header_given = True
            header_only = bytes(buf[4:end])  # the header word and the header, no body
            command = decode_command(header_only, max_header_bytes=self.max_header_bytes)
            return HeaderArrived(command)
        end = 4 + self._frame_length
        if len(buf) < end:
            return None
        frame = bytes(buf[4:end])
        del buf[:end]
        self._frame_length = self._header_length = -1
        self._header_given = False
        return FrameArrived(decode_command(frame, max_header_bytes=self.max_header_bytes))

    def rest(self) -> bytes:
        """What was read past the last whole frame (for the normal reader); empties this one."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
