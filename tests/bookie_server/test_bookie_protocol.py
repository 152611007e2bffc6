"""The bookie wire codec: round trips (any chunking of the stream) and refusal of bad frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.protocol import (
    PROTOCOL_VERSION,
    AddEntryRequest,
    AddEntryResponse,
    AuthRequest,
    AuthResponse,
    BookieAddress,
    BookieInfoRequest,
    BookieInfoResponse,
    FrameTooLargeError,
    Message,
    ProtocolError,
    ReadEntriesRequest,
    ReadEntriesResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    ReadLacResponse,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    decode_frame,
    encode,
)

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ids = st.integers(-1, 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)
statuses = st.sampled_from(Status)
bodies = st.binary(max_size=300)
master_keys = st.one_of(st.just(b""), st.binary(min_size=32, max_size=32))

requests = st.one_of(
    st.builds(AddEntryRequest, u64, ids, ids, ids, st.booleans(), bodies, master_keys),
    st.builds(ReadEntryRequest, u64, ids, ids, st.booleans(), i64, u32, master_keys),
    st.builds(ReadLacRequest, u64, ids),
    st.builds(WriteLacRequest, u64, ids, ids),
    st.builds(BookieInfoRequest, u64),
    st.builds(AuthRequest, u64, st.integers(0, 255), st.binary(max_size=80)),
    st.builds(ReadEntriesRequest, u64, ids, ids, u32, u32),
)
responses = st.one_of(
    st.builds(AddEntryResponse, u64, statuses, ids, ids),
    st.builds(ReadEntryResponse, u64, statuses, ids, ids, ids, bodies),
    st.builds(ReadLacResponse, u64, statuses, ids, ids),
    st.builds(WriteLacResponse, u64, statuses, ids),
    st.builds(BookieInfoResponse, u64, statuses, u64, u64, st.booleans(), st.text(max_size=40)),
    st.builds(AuthResponse, u64, statuses, st.integers(0, 255), st.binary(max_size=80)),
    st.builds(ReadEntriesResponse, u64, statuses, ids, ids, ids,
              st.lists(st.binary(max_size=60), max_size=8).map(tuple)),
)
messages = st.one_of(requests, responses)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for p in points + [len(data)]:
        pieces.append(data[start:p])
        start = p
    return pieces


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=12), st.lists(st.integers(0, 10_000), max_size=20))
def test_any_messages_survive_any_chunking(batch: list[Message], cuts: list[int]) -> None:
    stream = b"".join(encode(m) for m in batch)
    decoder = FrameDecoder()
    decoded: list[Message] = []
    for piece in _chunks(stream, cuts):
        decoded.extend(decoder.feed(piece))
    assert decoded == batch
    assert decoder.buffered_bytes == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=12), st.lists(st.integers(0, 10_000), max_size=20),
       st.integers(6, 200), st.booleans())
def test_large_frames_gathered_apart_survive_any_chunking(
    batch: list[Message], cuts: list[int], large: int, into: bool
) -> None:
    """Frames from `large` bytes on are gathered in a buffer of their own: fed in any pieces,
    or with `into` received straight into `receive_buffer()` wherever one is offered, the
    same messages come out (a batch answer's entries are views of its frame)."""
    stream = b"".join(encode(m) for m in batch)
    decoder = FrameDecoder(large_frame_bytes=large)
    decoded: list[Message] = []
    for piece in _chunks(stream, cuts):
        while piece:
            target = decoder.receive_buffer() if into else None
            if target is None:
                decoded.extend(decoder.feed(piece))
                break
            count = min(len(target), len(piece))
            target[:count] = piece[:count]
            target.release()
            decoded.extend(decoder.received(count))
            piece = piece[count:]
    assert decoded == batch
    assert decoder.buffered_bytes == 0 and decoder.receive_buffer() is None


def test_a_bad_large_frame_poisons_the_decoder() -> None:
    frame = bytearray(encode(ReadEntriesResponse(1, Status.OK, 2, 0, 1, (b"x" * 100,))))
    frame[4] = PROTOCOL_VERSION + 1
    decoder = FrameDecoder(large_frame_bytes=64)
    assert decoder.feed(frame[:10]) == [] and decoder.missing_bytes == len(frame) - 10
    with pytest.raises(ProtocolError):
        decoder.feed(frame[10:])
    assert decoder.receive_buffer() is None
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


@settings(max_examples=200, deadline=None)
@given(messages)
def test_every_message_round_trips_alone_and_byte_by_byte(msg: Message) -> None:
    frame = encode(msg)
    assert isinstance(frame, bytes)
    assert struct.unpack_from(">I", frame)[0] == len(frame) - 4
    assert decode_frame(frame[4:]) == msg
    decoder = FrameDecoder()
    out: list[Message] = []
    for i in range(len(frame)):
        out.extend(decoder.feed(frame[i : i + 1]))
        if i < len(frame) - 1:
            assert out == []  # never a half frame
    assert out == [msg]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_escapes_as_anything_but_protocol_error(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    try:
        decoder.feed(data)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decoder.feed(b"")  # poisoned


def test_oversize_length_is_refused_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">I", 1001))
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"more")


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    frame = encode(AddEntryRequest(1, 2, 3, 2, False, b"x" * 100))
    decoder = FrameDecoder(max_frame_bytes=len(frame) - 4)
    assert len(decoder.feed(frame)) == 1
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_bytes=len(frame) - 5).feed(frame)


def test_bad_version_op_code_and_lengths() -> None:
    good = encode(ReadLacRequest(7, 9))
    bad_version = good[:4] + bytes([PROTOCOL_VERSION + 1]) + good[5:]
    bad_op = good[:5] + b"\x7f" + good[6:]
    short_fields = struct.pack(">I", len(good) - 5) + good[4:-1]
    long_fields = struct.pack(">I", len(good) - 3) + good[4:] + b"\x00"
    tiny = struct.pack(">I", 1) + b"\x01"
    for bad, what in [
        (bad_version, "version"),
        (bad_op, "op code"),
        (short_fields, "bytes"),
        (long_fields, "bytes"),
        (tiny, "too short"),
    ]:
        with pytest.raises(ProtocolError, match=what):
            FrameDecoder().feed(bad)


def test_unknown_status_and_flag_bits_are_refused() -> None:
    frame = bytearray(encode(AddEntryResponse(1, Status.OK, 2, 3)))
    frame[4 + 2 + 8 : 4 + 2 + 10] = struct.pack(">H", 999)
    with pytest.raises(ProtocolError, match="status"):
        FrameDecoder().feed(bytes(frame))
    add = bytearray(encode(AddEntryRequest(1, 2, 3, 2, True, b"")))
    add[4 + 2 + 32] = 0x03
    with pytest.raises(ProtocolError, match="flag"):
        FrameDecoder().feed(bytes(add))


def test_invalid_utf8_bookie_id_is_refused() -> None:
    frame = encode(BookieInfoResponse(1, Status.OK, 1, 2, False, "ab"))
    broken = frame[:-2] + b"\xff\xfe"
    with pytest.raises(ProtocolError, match="UTF-8"):
        FrameDecoder().feed(broken)


def test_direction_is_enforced() -> None:
    request = encode(ReadLacRequest(1, 2))
    response = encode(ReadLacResponse(1, Status.OK, 2, 5))
    assert len(FrameDecoder(accept="requests").feed(request)) == 1
    with pytest.raises(ProtocolError, match="response"):
        FrameDecoder(accept="requests").feed(response)
    with pytest.raises(ProtocolError, match="request"):
        FrameDecoder(accept="responses").feed(request)


def test_out_of_range_fields_cannot_be_encoded() -> None:
    with pytest.raises(ProtocolError):
        encode(ReadLacRequest(-1, 2))
    with pytest.raises(ProtocolError):
        encode(ReadEntryRequest(1, 2, 3, False, -1, 2**32))
    with pytest.raises(ProtocolError):
        encode("not a message")  # type: ignore[arg-type]


def test_fence_only_read_is_encodable() -> None:
    msg = ReadEntryRequest(5, 42, -1, fence=True)
    assert FrameDecoder().feed(encode(msg)) == [msg]


def test_bookie_address_round_trips() -> None:
    for text in ["127.0.0.1:3181", "bookie-1.example:0", "[::1]:3181"]:
        assert str(BookieAddress.parse(text)) == text
    assert BookieAddress.parse("[::1]:3181").host == "::1"
    for bad in ["nohost", ":12", "h:", "h:99999", "h:x1"]:
        with pytest.raises(ValueError):
            BookieAddress.parse(bad)
