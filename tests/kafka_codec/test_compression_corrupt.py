"""protocols/kafka/compression.decompress on damaged input: for every codec (and the legacy
lz4 frame walk), bytes that are not a valid compressed payload either decode or raise
CompressionError, never a codec library's own exception (which callers do not turn into
CORRUPT_MESSAGE: it would surface as UNKNOWN_SERVER_ERROR with a traceback)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs

CASES = [(codecs.GZIP, False), (codecs.SNAPPY, False), (codecs.LZ4, False),
         (codecs.LZ4, True), (codecs.ZSTD, False)]
IDS = ["gzip", "snappy", "lz4", "lz4-legacy", "zstd"]


def _decompress_or_refuse(codec: int, data: bytes, legacy_lz4: bool) -> None:
    try:
        out = codecs.decompress(codec, data, max_bytes=1 << 20, legacy_lz4=legacy_lz4)
    except codecs.CompressionError:
        return
    assert len(out) <= 1 << 20


@st.composite
def damaged(draw: st.DrawFn, codec: int) -> bytes:
    """A valid payload of `codec`, then flipped bytes, a cut, or bytes put in."""
    plain = draw(st.binary(min_size=1, max_size=2000)) * draw(st.integers(1, 40))
    data = bytearray(codecs.compress(codec, plain))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if how == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@pytest.mark.parametrize(("codec", "legacy_lz4"), CASES, ids=IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_payloads_decode_or_raise_compression_error(
        codec: int, legacy_lz4: bool, data: st.DataObject) -> None:
    _decompress_or_refuse(codec, data.draw(damaged(codec)), legacy_lz4)


@pytest.mark.parametrize(("codec", "legacy_lz4"), CASES, ids=IDS)
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_decode_or_raise_compression_error(
        codec: int, legacy_lz4: bool, data: bytes) -> None:
    _decompress_or_refuse(codec, data, legacy_lz4)


def test_corrupt_snappy_and_legacy_lz4_blocks_raise_compression_error() -> None:
    # a raw snappy block claiming more bytes than it holds, and in the xerial framing
    bad_block = b"\xff\xff\xff\xff\x0f garbage"
    framed = codecs.compress(codecs.SNAPPY, b"x" * 100)
    framed = framed[:16] + len(bad_block).to_bytes(4, "big") + bad_block
    # an lz4 frame (independent blocks, no checksum) whose one compressed block is garbage
    frame = bytes.fromhex("04224d18" "60" "40" "82") + (4).to_bytes(4, "little") \
        + b"\xf0\xff\xff\xff" + bytes(4)
    for codec, data, legacy in [(codecs.SNAPPY, bad_block, False),
                                (codecs.SNAPPY, framed, False), (codecs.LZ4, frame, True)]:
        with pytest.raises(codecs.CompressionError, match="corrupt"):
            codecs.decompress(codec, data, legacy_lz4=legacy)
