"""The pre-login reader of the RocketMQ 4.x port (protocols/rocketmq/login_gate.py), sans-IO.

Fed the way the listener feeds it (reads of at most R bytes, never more than `wanted`): any
sequence of frames, cut anywhere, comes out as a header then the whole frame each; a refused
header's body is dropped as it arrives and the frames after it are still read; the buffer never
holds more than the current step plus one read; oversize prefixes are refused before anything
of the frame is kept; garbage gives MalformedFrameError or nothing, never another exception
(a header nested deeper than Python's stack included: it once took the whole broker down).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.rocketmq.codec import encode_command, make_request
from protocols.rocketmq.errors import FrameTooLargeError, MalformedFrameError
from protocols.rocketmq.login_gate import (
    FrameArrived,
    HeaderArrived,
    PreAuthEvent,
    PreAuthReader,
)

READ = 1024
requests = st.builds(
    lambda code, key, body: make_request(code, {"AccessKey": key, "topic": "t"}, body),
    st.integers(0, 400), st.text(max_size=20), st.binary(max_size=5000))


def drive(reader: PreAuthReader, stream: bytes, skip: list[bool], read: int = READ
          ) -> tuple[list[PreAuthEvent], int]:  # fmt: skip
    """Feed `stream` as the listener does; skip the body of the i-th header when skip[i].
    Returns the events and the most the reader ever held."""
    events: list[PreAuthEvent] = []
    most = 0
    headers = 0
    pos = 0
    while True:
        event = reader.next_event()
        if event is None:
            if pos >= len(stream):
                return events, most
            take = min(read, reader.wanted)
            reader.feed(stream[pos:pos + take])
            pos += take
            most = max(most, reader.buffered)
            continue
        events.append(event)
        if isinstance(event, HeaderArrived):
            if skip[headers % len(skip)]:
                reader.skip_body()
            headers += 1


@settings(max_examples=150, deadline=None)
@given(st.lists(requests, min_size=1, max_size=6), st.lists(st.booleans(), min_size=1),
       st.integers(1, 3000))
def test_frames_come_out_header_first_and_skipped_bodies_are_never_held(
        commands: list, skip: list[bool], read: int) -> None:
    frames = [encode_command(c) for c in commands]
    reader = PreAuthReader(max_frame_bytes=64 * 1024)
    events, most = drive(reader, b"".join(frames), skip, read)
    expected: list[tuple[str, int]] = []
    for i, command in enumerate(commands):
        expected.append(("header", command.code))
        if not skip[i % len(skip)]:
            expected.append(("frame", command.code))
    got = [("header" if isinstance(e, HeaderArrived) else "frame", e.command.code)
           for e in events]
    assert got == expected
    kept = [c for i, c in enumerate(commands) if not skip[i % len(skip)]]
    bodies = [e.command.body for e in events if isinstance(e, FrameArrived)]
    assert bodies == [c.body for c in kept]
    assert all(e.command.body == b"" for e in events if isinstance(e, HeaderArrived))
    largest_header = max(len(f) - len(c.body) for f, c in zip(frames, commands, strict=True))
    largest_kept = max((len(encode_command(c)) for c in kept), default=0)
    assert most <= max(largest_header, largest_kept) + read
    assert reader.rest() == b""


def test_an_oversize_frame_or_header_is_refused_from_its_prefix() -> None:
    reader = PreAuthReader(max_frame_bytes=1000, max_header_bytes=100)
    reader.feed(struct.pack(">iI", 1001, 10))
    with pytest.raises(FrameTooLargeError):
        reader.next_event()
    reader = PreAuthReader(max_frame_bytes=1000, max_header_bytes=100)
    reader.feed(struct.pack(">iI", 500, 101))
    with pytest.raises(FrameTooLargeError):
        reader.next_event()
    assert reader.buffered == 8


def test_rest_hands_over_what_was_read_past_the_frame() -> None:
    first = encode_command(make_request(10, {"a": "1"}, b"body"))
    second = encode_command(make_request(11, {"b": "2"}, b"next"))
    reader = PreAuthReader()
    reader.feed(first + second[:7])
    assert isinstance(reader.next_event(), HeaderArrived)
    frame = reader.next_event()
    assert isinstance(frame, FrameArrived) and frame.command.body == b"body"
    assert reader.rest() == second[:7]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(1, 500))
def test_garbage_is_refused_or_waited_for_never_a_crash(data: bytes, read: int) -> None:
    reader = PreAuthReader(max_frame_bytes=2000, max_header_bytes=500)
    try:
        drive(reader, data, [False, True], read)
    except MalformedFrameError:
        pass


@pytest.mark.parametrize("opening", [b"[", b'{"a":'])
def test_a_deeply_nested_header_is_malformed_not_a_crash(opening: bytes) -> None:
    header = opening * 40_000  # json.loads raises RecursionError here, not ValueError
    reader = PreAuthReader()
    reader.feed(struct.pack(">iI", 4 + len(header), len(header)) + header)
    with pytest.raises(MalformedFrameError):
        reader.next_event()
