"""Fuzzing decode_request: only MalformedRequestError / UnsupportedVersionError may escape,
and hostile lengths never make the decoder allocate beyond the frame's own size."""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.kafka.codec import RequestHeader, decode_request, encode_request
from protocols.kafka.errors import MalformedRequestError, UnsupportedVersionError
from protocols.kafka.schema import SCHEMAS
from tests.kafka_codec.kafka_codec_samples import all_versions, request_sample

ALLOWED = (MalformedRequestError, UnsupportedVersionError)
VERSIONS = all_versions()
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_refuse(frame: bytes) -> None:
    try:
        decode_request(frame)
    except ALLOWED:
        pass


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes(frame: bytes) -> None:
    _decode_or_refuse(frame)


@FUZZ
@given(st.sampled_from(VERSIONS), st.binary(max_size=256))
def test_valid_header_random_body(api_version: tuple[int, int], tail: bytes) -> None:
    api_key, version = api_version
    prefix = struct.pack(">hhi", api_key, version, 1) + b"\x00\x01c"
    if SCHEMAS[api_key].is_flexible(version):
        prefix += b"\x00"
    _decode_or_refuse(prefix + tail)


@FUZZ
@given(
    st.sampled_from(VERSIONS),
    st.integers(0, 2),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_mutated_valid_requests(
    api_version: tuple[int, int], seed: int, edits: list[tuple[int, int]]
) -> None:
    api_key, version = api_version
    frame = bytearray(
        encode_request(
            RequestHeader(api_key, version, 1, "c"), request_sample(SCHEMAS[api_key], version, seed)
        )[4:]
    )
    for where, value in edits:
        frame[8 + where % max(1, len(frame) - 8)] = value  # keep key/version/correlation id
    _decode_or_refuse(bytes(frame))


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_length_fields_set_to_extremes(api_key: int, version: int) -> None:
    """Overwrite every 4-byte / 2-byte / 1-byte position with huge lengths; memory stays small."""
    frame = encode_request(
        RequestHeader(api_key, version, 1, "c"), request_sample(SCHEMAS[api_key], version, 0)
    )[4:]
    rng = random.Random(api_key * 100 + version)
    positions = list(range(8, len(frame)))
    rng.shuffle(positions)
    tracemalloc.start()
    try:
        for pos in positions[:40]:
            for patch in (
                b"\x7f\xff\xff\xff",
                b"\xff\xff\xff\xfe",
                b"\x7f\xff",
                b"\xff\xff\xff\x0f",
            ):
                mutated = frame[:pos] + patch + frame[pos + len(patch) :]
                _decode_or_refuse(mutated)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000
