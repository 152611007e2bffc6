"""Record varints (protocols/kafka/record_batch.py): the one-byte fast paths read and write
exactly what the general loop does, and batches round-trip through them (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka.errors import CorruptMessageError
from protocols.kafka.record_batch import (
    Record,
    build_batch,
    decode_records,
    read_varint,
    write_varint,
)

longs = st.one_of(st.integers(-70, 70), st.integers(-(2**63), 2**63 - 1))


def reference_write(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@settings(max_examples=500, deadline=None)
@given(longs, st.binary(max_size=3))
def test_varints_round_trip_as_the_general_encoding(value: int, tail: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == reference_write(value)
    assert read_varint(bytes(out) + tail, 0) == (value, len(out))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_any_bytes_read_or_refuse(data: bytes, pos: int) -> None:
    try:
        value, end = read_varint(data, pos)
    except CorruptMessageError:
        return
    assert pos < end <= len(data) and not data[end - 1] & 0x80
    assert all(b & 0x80 for b in data[pos:end - 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=80)),
                          st.one_of(st.none(), st.binary(max_size=300)),
                          st.lists(st.tuples(st.text(max_size=10),
                                             st.one_of(st.none(), st.binary(max_size=70))),
                                   max_size=5),
                          st.integers(0, 2**41)),
                min_size=1, max_size=6))
def test_batches_round_trip(items: list[tuple[bytes | None, bytes | None,
                                              list[tuple[str, bytes | None]], int]]) -> None:
    records = [Record(0, ts, k, v, h) for k, v, h, ts in items]
    decoded = decode_records(build_batch(records, base_offset=5))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (5 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(items)]


def test_a_truncated_varint_is_refused() -> None:
    with pytest.raises(CorruptMessageError):
        read_varint(b"\x80", 0)
    with pytest.raises(CorruptMessageError):
        read_varint(b"", 0)


def reference_headers(payload: bytes, records: int = 1) -> object:
    """The records' headers read field by field with read_bytes only (no fast path)."""
    from protocols.kafka.record_batch import read_bytes

    out, pos = [], 0
    try:
        for _record in range(records):
            length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 0 or end > len(payload):
                raise CorruptMessageError("record runs past the batch")
            pos += 1
            for _ in range(2):
                _, pos = read_varint(payload, pos)
            for _ in range(2):
                _, pos = read_bytes(payload, pos)
            count, pos = read_varint(payload, pos)
            headers = []
            for _ in range(count):
                k, pos = read_bytes(payload, pos)
                v, pos = read_bytes(payload, pos)
                headers.append(((k or b"").decode("utf-8", "replace"), v))
            if pos != end:
                raise CorruptMessageError("record length does not match its fields")
            out.append(headers)
    except CorruptMessageError:
        return CorruptMessageError
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=70))),
                max_size=4), st.integers(0, 400), st.integers(0, 255))
def test_damaged_headers_read_as_field_by_field(headers: list[tuple[str, bytes | None]],
                                                at: int, byte: int) -> None:
    batch = bytearray(build_batch([Record(0, 1, b"k", b"v", headers)]))
    payload_at = 61 + at % max(1, len(batch) - 61)
    batch[payload_at] = byte
    try:
        got: object = [r.headers for r in decode_records(bytes(batch))]
    except CorruptMessageError:
        got = CorruptMessageError
    # one record: the batch header still says so; the payload is read as the reference does
    assert got == reference_headers(bytes(batch[61:]))
