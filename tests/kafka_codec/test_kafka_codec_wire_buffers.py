"""encode_response_buffers (vectored answers) and FrameReader's chunk fast path."""

from __future__ import annotations

import os
import random
import struct

import pytest

from protocols.kafka.codec import RequestHeader, encode_response, encode_response_buffers
from protocols.kafka.errors import FrameTooLargeError
from protocols.kafka.framing import FrameReader, frame
from protocols.kafka.types import PASS_THROUGH_MIN_BYTES

FETCH = 1


def _fetch_body(records: object) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
        "topic": "t", "topic_id": None, "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 10,
            "last_stable_offset": 10, "log_start_offset": 0, "aborted_transactions": [],
            "preferred_read_replica": -1, "records": records}]}]}


@pytest.mark.parametrize("version", [4, 11, 12, 13])
def test_buffers_join_to_the_same_frame_and_pass_large_batches_through(version: int) -> None:
    big = [os.urandom(PASS_THROUGH_MIN_BYTES + 7), os.urandom(3 * PASS_THROUGH_MIN_BYTES)]
    small = os.urandom(100)
    header = RequestHeader(FETCH, version, 77, "c")
    for records in ([big[0], small, big[1]], big[0], [small], memoryview(big[1]), None, b""):
        body = _fetch_body(records)
        buffers = encode_response_buffers(header, body)
        assert b"".join(buffers) == encode_response(header, body)
        (size,) = struct.unpack_from(">i", buffers[0], 0)
        assert size == sum(memoryview(b).nbytes for b in buffers) - 4
    buffers = encode_response_buffers(header, _fetch_body([big[0], small, big[1]]))
    assert any(b is big[0] for b in buffers) and any(b is big[1] for b in buffers)
    assert not any(b is small for b in buffers)  # small pieces are copied into the frame


def _stream(frames: list[bytes]) -> bytes:
    return b"".join(frame(f) for f in frames)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_random_chunking_yields_every_frame_once(kind: str) -> None:
    rng = random.Random(kind)
    frames = [rng.randbytes(rng.choice([0, 1, 5, 300, 5000])) for _ in range(200)]
    data = _stream(frames)
    for _ in range(30):
        reader = FrameReader(10_000)
        got: list[bytes] = []
        pos = 0
        while pos < len(data):
            n = rng.randint(1, 12_000)
            chunk = data[pos : pos + n]
            pos += n
            fed = bytearray(chunk) if kind == "bytearray" else (
                memoryview(chunk) if kind == "memoryview" else chunk)
            got += reader.feed(fed)
            if isinstance(fed, bytearray):
                fed[:] = b"\xee" * len(fed)  # the reader must not keep views of mutable input
            assert reader.buffered_bytes == (pos if pos < len(data) else len(data)) - sum(
                4 + len(f) for f in got)
        assert got == frames
        assert reader.at_frame_boundary()
        assert all(type(f) is bytes for f in got)


def test_oversize_prefix_split_across_chunks_is_refused_before_its_body() -> None:
    reader = FrameReader(1000)
    assert reader.feed(frame(b"ok") + b"\x00\x00") == [b"ok"]  # next prefix incomplete
    with pytest.raises(FrameTooLargeError):
        reader.feed(b"\x10\x00" + b"x" * 10)
    assert reader.buffered_bytes == 0
    with pytest.raises(FrameTooLargeError):
        reader.feed(b"more")


def test_oversize_frame_after_whole_frames_in_one_chunk() -> None:
    reader = FrameReader(1000)
    with pytest.raises(FrameTooLargeError):
        reader.feed(frame(b"a") + struct.pack(">i", 5000) + b"partial")
    assert reader.buffered_bytes == 0
