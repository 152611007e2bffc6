"""The replay hot-path decoder agrees with protocols/kafka/record_batch.decode_records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs
from protocols.kafka.errors import CorruptMessageError
from protocols.kafka.record_batch import (
    HEADER_SIZE,
    Record,
    build_batch,
    decode_records,
    parse_header,
    read_varint,
)
from spark_bridge.batch_columns import Columns, decode_batch_columns

blobs = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(
    st.tuples(blobs, blobs, st.integers(-5000, 5000),
              st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)),
    min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(rows=records, codec=st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY,
                                            codecs.LZ4, codecs.ZSTD]),
       base=st.integers(0, 1 << 40), log_append=st.booleans(),
       cut=st.tuples(st.integers(0, 45), st.integers(0, 45)))
def test_same_rows_as_decode_records(rows: list, codec: int, base: int, log_append: bool,
                                     cut: tuple[int, int]) -> None:  # fmt: skip
    batch = build_batch(
        [Record(0, 1_700_000_000_000 + ts, k, v, list(h)) for k, v, ts, h in rows],
        base_offset=base, compression=codec,
        log_append_time_ms=1_800_000_000_000 if log_append else None)
    start, end = base + min(cut), base + max(cut)
    expected = [r for r in decode_records(batch) if start <= r.offset < end]
    out = Columns(True)
    decode_batch_columns(batch, parse_header(batch), start, end, out)
    assert out.offsets == [r.offset for r in expected]
    assert out.keys == [r.key for r in expected]
    assert out.values == [r.value for r in expected]
    assert out.timestamps == [r.timestamp for r in expected]
    assert out.ts_types == [1 if log_append else 0] * len(expected)
    assert out.headers == [[{"key": k, "value": v} for k, v in r.headers] for r in expected]


def test_a_truncated_batch_is_corrupt_not_an_index_error() -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 100)] * 3))
    del batch[-50:]
    header = parse_header(bytes(batch))
    header.batch_length -= 50
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(bytes(batch), header, 0, 10, Columns(False))


@pytest.mark.parametrize("compiled", [True, False])
def test_a_damaged_offset_delta_never_leaves_the_range(compiled: bool) -> None:
    """A stored batch lying wholly inside the range whose last record's offset delta points
    past it (the header's last offset delta still says 2): no row outside [start, end)."""
    batch = bytearray(build_batch([(b"k", b"v")] * 3, base_offset=100))
    pos = HEADER_SIZE
    for _ in range(2):  # to the third record: its length, then past it
        length, pos = read_varint(batch, pos)
        pos += length
    _, pos = read_varint(batch, pos)
    pos += 1  # attributes
    _, pos = read_varint(batch, pos)  # timestamp delta; the offset delta (2) is next
    assert batch[pos] == 4  # zigzag 2
    batch[pos] = 80  # zigzag 40: offset 140
    out = Columns(False)
    decode_batch_columns(bytes(batch), parse_header(bytes(batch)), 100, 103, out,
                         compiled=compiled)
    assert out.offsets == [100, 101]
