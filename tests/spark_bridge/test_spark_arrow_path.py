"""The replay's Arrow path (the bulk C decoder, or the compiled / pure per-record decoders ->
column lists -> Arrow, each in turn) returns exactly the
rows of the row path (protocols/kafka's decode_records, one Record per row, with the
transaction rules applied by hand): keys, values, null keys and values, headers, CreateTime and
LogAppendTime timestamps, every codec, transactional batches committed, aborted and left open,
control records skipped, an offset range cut inside batches. No Spark: pure decoding.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    parse_header,
)
from spark_bridge import batch_columns, bulk_decode
from spark_bridge.record_decode import decode_to_arrow

TS = 1_700_000_000_000
blobs = st.one_of(st.none(), st.binary(max_size=200))
rows = st.lists(st.tuples(blobs, blobs, st.integers(0, 5000),
                          st.lists(st.tuples(st.text(max_size=6), blobs), max_size=2)),
                min_size=1, max_size=12)  # fmt: skip
events = st.lists(st.one_of(
    st.tuples(st.just("data"), rows, st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY,
                                                       codecs.LZ4, codecs.ZSTD]),
              st.booleans()),
    st.tuples(st.just("txn"), rows, st.sampled_from([7, 8]), st.booleans()),
    st.tuples(st.just("marker"), st.sampled_from([7, 8]),
              st.sampled_from([CONTROL_COMMIT, CONTROL_ABORT]), st.booleans()),
), min_size=1, max_size=10)  # fmt: skip


def _log(script: list[tuple[Any, ...]]) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    for kind, a, b, flag in script:
        if kind == "marker":
            batch = build_control_batch(b, producer_id=a, producer_epoch=0, base_offset=offset,
                                        timestamp_ms=TS + offset)
        else:
            records = [Record(0, TS + ts, k, v, list(h)) for k, v, ts, h in a]
            if kind == "data":
                batch = build_batch(records, base_offset=offset, compression=b,
                                    log_append_time_ms=TS + 9_999 if flag else None)
            else:
                batch = build_batch(records, base_offset=offset, compression=codecs.LZ4,
                                    producer_id=b, producer_epoch=0, base_sequence=0,
                                    is_transactional=True)
        out.append(batch)
        offset = parse_header(batch).base_offset + parse_header(batch).last_offset_delta + 1
    return out


def _row_path(log: list[bytes], start: int, end: int, committed: bool) -> list[dict[str, Any]]:
    """Rows per Record from decode_records; transactions resolved by their markers."""
    done: list[tuple[int, dict[str, Any]]] = []
    open_txns: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for batch in log:
        header = parse_header(batch)
        if header.is_control:
            if committed and header.is_transactional and header.producer_id in open_txns:
                held = open_txns.pop(header.producer_id)
                if decode_records(batch)[0].key[2:4] == CONTROL_COMMIT.to_bytes(2, "big"):
                    done.extend(held)
            continue
        for r in decode_records(batch):
            if not start <= r.offset < end:
                continue
            row = {"key": r.key, "value": r.value, "topic": "t", "partition": 3,
                   "offset": r.offset, "timestamp": r.timestamp,
                   "timestampType": header.timestamp_type,
                   "headers": [{"key": k, "value": v} for k, v in r.headers]}
            if committed and header.is_transactional:
                open_txns.setdefault(header.producer_id, []).append((r.offset, row))
            else:
                done.append((r.offset, row))
    return [row for _offset, row in sorted(done, key=lambda item: item[0])]


def _arrow_path(log: list[bytes], start: int, end: int, committed: bool, headers: bool
                ) -> list[dict[str, Any]]:  # fmt: skip
    chunks = [log[i:i + 3] for i in range(0, len(log), 3)]
    out: list[dict[str, Any]] = []
    for batch in decode_to_arrow(iter(chunks), iter(()), "t", 3, start, end,
                                 include_headers=headers, read_committed=committed,
                                 rows_per_batch=5):  # fmt: skip
        for row in batch.to_pylist():
            row["timestamp"] = round(row["timestamp"].timestamp() * 1000)
            out.append(row)
    return out


def test_the_compiled_decoder_is_there() -> None:
    assert batch_columns._CompiledBatch is not None  # aiokafka is a test dependency


@pytest.mark.parametrize("path", ["bulk", "compiled", "pure"])
@settings(max_examples=60, deadline=None)
@given(script=events, cut=st.tuples(st.integers(0, 80), st.integers(0, 80)),
       committed=st.booleans(), headers=st.booleans())
def test_arrow_path_equals_row_path(path: str, script: list[tuple[Any, ...]],
                                    cut: tuple[int, int], committed: bool,
                                    headers: bool) -> None:  # fmt: skip
    log = _log(script)
    start, end = min(cut), max(cut)
    expected = _row_path(log, start, end, committed)
    if not headers:
        for row in expected:
            del row["headers"]
    saved = batch_columns._CompiledBatch, bulk_decode._decode_sections
    if path != "bulk":
        bulk_decode._decode_sections = None
    if path == "pure":
        batch_columns._CompiledBatch = None
    try:
        got = _arrow_path(log, start, end, committed, headers)
    finally:
        batch_columns._CompiledBatch, bulk_decode._decode_sections = saved
    assert got == expected
