"""FrameReader: complete frames only, oversize lengths refused before buffering the body."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka.errors import FrameTooLargeError, MalformedRequestError
from protocols.kafka.framing import FrameReader, frame


def test_frames_split_across_feeds() -> None:
    reader = FrameReader()
    data = frame(b"hello") + frame(b"") + frame(b"world!")
    assert reader.feed(data[:2]) == []
    assert reader.feed(data[2:7]) == []
    assert reader.buffered_bytes == 7
    assert reader.feed(data[7:]) == [b"hello", b"", b"world!"]
    assert reader.at_frame_boundary()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=50), max_size=10), st.lists(st.integers(1, 40), max_size=30))
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    reader = FrameReader(max_frame_bytes=64)
    got: list[bytes] = []
    pos = 0
    for cut in cuts:
        got += reader.feed(stream[pos : pos + cut])
        pos += cut
    got += reader.feed(stream[pos:])
    assert got == payloads
    assert reader.buffered_bytes == 0


def test_oversize_length_refused_before_body_is_buffered() -> None:
    reader = FrameReader(max_frame_bytes=1000)
    with pytest.raises(FrameTooLargeError) as caught:
        reader.feed(struct.pack(">i", 1001) + b"x" * 5000)
    assert caught.value.size == 1001
    assert reader.buffered_bytes == 0
    with pytest.raises(FrameTooLargeError):  # the reader stays poisoned
        reader.feed(frame(b"ok"))


def test_oversize_length_refused_when_prefix_arrives_in_pieces() -> None:
    reader = FrameReader(max_frame_bytes=10)
    assert reader.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLargeError):
        reader.feed(b"\x01\x00" + b"y" * 300)
    assert reader.buffered_bytes == 0


def test_oversize_second_frame_after_a_good_one() -> None:
    reader = FrameReader(max_frame_bytes=10)
    with pytest.raises(FrameTooLargeError):
        reader.feed(frame(b"fine") + struct.pack(">i", 11))


def test_negative_length_is_malformed() -> None:
    reader = FrameReader()
    with pytest.raises(MalformedRequestError):
        reader.feed(struct.pack(">i", -5))


def test_frame_too_large_is_a_malformed_request() -> None:
    assert issubclass(FrameTooLargeError, MalformedRequestError)


def test_never_hands_out_half_a_frame() -> None:
    reader = FrameReader()
    data = frame(b"abcdef")
    for i in range(len(data) - 1):
        assert reader.feed(data[i : i + 1]) == []
    assert reader.feed(data[-1:]) == [b"abcdef"]
