"""The bulk decoder (spark_bridge/bulk_decode.py + bulk_records.c) gives exactly the Arrow batch
of the per-record decoders (batch_columns.py) on generated batches: several batches at once,
every codec, null keys and values, headers (null values, non-UTF-8 keys: those go back to the
per-record path), CreateTime and LogAppendTime, offset ranges cut inside batches. Damaged
batches are refused (None) or decode to the pure decoder's rows, never to other ones. No Spark.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs
from protocols.kafka.errors import CorruptMessageError
from protocols.kafka.record_batch import (
    HEADER_SIZE,
    Record,
    build_batch,
    parse_header,
    write_varint,
)
from spark_bridge import batch_columns, bulk_decode
from spark_bridge.bulk_decode import BatchRefs
from spark_bridge.record_decode import columns_to_arrow

TS = 1_700_000_000_000
blobs = st.one_of(st.none(), st.binary(max_size=300))
header_keys = st.one_of(st.text(max_size=8), st.binary(max_size=4))  # bytes: maybe not UTF-8
rows = st.lists(st.tuples(blobs, blobs, st.integers(-5000, 5000),
                          st.lists(st.tuples(header_keys, blobs), max_size=3)),
                min_size=1, max_size=20)  # fmt: skip
batches = st.lists(st.tuples(rows, st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY,
                                                    codecs.LZ4, codecs.ZSTD]), st.booleans()),
                   min_size=1, max_size=4)  # fmt: skip


def _build(spec: list[tuple[Any, int, bool]], base: int) -> list[bytes]:
    out, offset = [], base
    for records, codec, log_append in spec:
        built = [Record(0, TS + ts, k, v, [(h if isinstance(h, str) else "", hv) for h, hv in hs])
                 for k, v, ts, hs in records]  # fmt: skip
        batch = build_batch(built, base_offset=offset, compression=codec,
                            log_append_time_ms=TS + 9_999 if log_append else None)
        if codec == codecs.NONE:  # header keys given as bytes go in raw (maybe not UTF-8)
            batch = _raw_body(batch, records)
        out.append(batch)
        offset += len(records)
    return out


def _raw_body(batch: bytes, records: list[Any]) -> bytes:
    """The same uncompressed batch with its records written here, header keys as given."""
    base_ts = parse_header(batch).base_timestamp
    body = bytearray()
    for delta, (k, v, ts, hs) in enumerate(records):
        rec = bytearray(b"\x00")
        write_varint(rec, TS + ts - base_ts)
        write_varint(rec, delta)
        for blob in (k, v):
            write_varint(rec, -1 if blob is None else len(blob))
            rec += blob or b""
        write_varint(rec, len(hs))
        for h, hv in hs:
            raw = h.encode() if isinstance(h, str) else h
            write_varint(rec, len(raw))
            rec += raw
            write_varint(rec, -1 if hv is None else len(hv))
            rec += hv or b""
        write_varint(body, len(rec))
        body += rec
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE + len(body) - 12)
    return bytes(head + body)


def _refs(log: list[bytes], start: int, end: int, headers: bool) -> BatchRefs:
    refs = BatchRefs(headers)
    for batch in log:
        refs.add(batch, parse_header(batch), start, end)
    return refs


def test_the_bulk_decoder_is_there() -> None:
    assert bulk_decode.available()  # cc is on every machine the suite runs on


@settings(max_examples=80, deadline=None)
@given(spec=batches, base=st.integers(0, 1 << 40), headers=st.booleans(),
       cut=st.tuples(st.integers(0, 85), st.integers(0, 85)))
def test_bulk_equals_per_record(spec: list[Any], base: int, headers: bool,
                                cut: tuple[int, int]) -> None:  # fmt: skip
    log = _build(spec, base)
    start, end = base + min(cut), base + max(cut)
    refs = _refs(log, start, end, headers)
    expected = columns_to_arrow(refs.to_columns(), "t", 5)
    got = refs.decode_bulk("t", 5)
    if got is None:  # only a header key that is not UTF-8 sends a group back
        assert headers and any(isinstance(h, bytes) for r in spec for row in r[0]
                               for h, _v in row[3])  # fmt: skip
        return
    assert got.schema == expected.schema
    assert got.equals(expected), (got.to_pylist(), expected.to_pylist())


@settings(max_examples=80, deadline=None)
@given(spec=batches, at=st.integers(61, 1 << 16), byte=st.integers(0, 255),
       headers=st.booleans())
def test_a_damaged_batch_is_refused_or_decodes_alike(spec: list[Any], at: int, byte: int,
                                                      headers: bool) -> None:  # fmt: skip
    log = _build(spec, 0)
    damaged = bytearray(log[0])
    damaged[at % len(damaged)] = byte
    log[0] = bytes(damaged)
    refs = _refs(log, 0, 1 << 20, headers)
    saved, batch_columns._CompiledBatch = batch_columns._CompiledBatch, None
    try:  # the pure decoder: the compiled one trusts a whole batch's offsets (a damaged
        expected: pa.RecordBatch | None = columns_to_arrow(refs.to_columns(), "t", 0)
    except Exception:  # noqa: BLE001 - offset delta can leave the range there)
        expected = None
    finally:
        batch_columns._CompiledBatch = saved
    got = refs.decode_bulk("t", 0)
    if got is not None:
        assert expected is not None and got.equals(expected)


def test_a_truncated_batch_is_refused_and_the_per_record_error_stays() -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 100)] * 3))
    del batch[-50:]
    header = parse_header(bytes(batch))
    header.batch_length -= 50
    refs = BatchRefs(False)
    refs.add(bytes(batch), header, 0, 10)
    assert refs.decode_bulk("t", 0) is None
    with pytest.raises(CorruptMessageError):
        refs.to_columns()
