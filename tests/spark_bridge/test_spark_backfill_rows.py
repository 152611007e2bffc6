"""The backfill writer's bulk column preparation agrees with its per-row rules."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_bridge.backfill_rows import (
    UNASSIGNED,
    RowColumns,
    fast_partitions,
    row_partition,
    timestamps_ms,
)
from spark_bridge.options import OptionError
from spark_bridge.partitioner import partition_for_key

keys = st.one_of(st.none(), st.binary(max_size=6))
rows_strategy = st.lists(st.tuples(keys, st.one_of(st.none(), st.integers(0, 5))),
                         min_size=1, max_size=1200)  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(rows=rows_strategy, task=st.integers(0, 9), first=st.integers(0, 5000),
       count=st.integers(1, 6), with_parts=st.booleans())
def test_fast_partitions_are_the_per_row_rules(rows: list[tuple[bytes | None, int | None]],
                                               task: int, first: int, count: int,
                                               with_parts: bool) -> None:  # fmt: skip
    columns = {"value": pa.array([b"v"] * len(rows), pa.binary()),
               "key": pa.array([k for k, _p in rows], pa.binary())}
    if with_parts:
        columns["partition"] = pa.array([p for _k, p in rows], pa.int32())
    cols = RowColumns.of(pa.RecordBatch.from_pydict(columns))
    given_parts = [p for _k, p in rows] if with_parts else [None] * len(rows)
    try:
        expected = [row_partition(k, p, first + i, task, count, "t", resuming=False)
                    for i, ((k, _), p) in enumerate(zip(rows, given_parts, strict=True))]
    except OptionError as exc:
        with pytest.raises(OptionError) as bulk:
            fast_partitions(cols, task, first, count, "t")
        assert str(bulk.value) == str(exc)
        return
    assert fast_partitions(cols, task, first, count, "t") == expected


def test_row_partition_rules() -> None:
    assert row_partition(b"k", None, 7, 0, 4, "t", resuming=False) == UNASSIGNED
    assert row_partition(b"k", None, 7, 0, 4, "t", resuming=True) == partition_for_key(b"k", 4)
    assert row_partition(b"", None, 7, 0, 4, "t", resuming=False) == partition_for_key(b"", 4)
    assert row_partition(None, None, 511, 1, 4, "t", resuming=False) == 1
    assert row_partition(None, None, 512, 1, 4, "t", resuming=False) == 2
    assert row_partition(b"k", 3, 0, 0, 4, "t", resuming=False) == 3
    with pytest.raises(OptionError, match="has no partition 4"):
        row_partition(None, 4, 0, 0, 4, "t", resuming=False)


def test_columns_convert_strings_nulls_and_timestamps() -> None:
    stamps = [-1_500, 0, None, 1_700_000_000_123]
    for unit, scale in (("s", 1), ("ms", 1), ("us", 1000), ("ns", 1_000_000)):
        raw = [None if s is None else (s // 1000 if unit == "s" else s * scale)
               for s in stamps]  # fmt: skip
        batch = pa.RecordBatch.from_pydict({
            "value": pa.array(["a", None, "ü", ""], pa.string()),
            "key": pa.array([None, b"k", b"", b"kk"], pa.binary()),
            "timestamp": pa.array(raw, pa.int64()).cast(pa.timestamp(unit, tz="UTC")),
        })
        cols = RowColumns.of(batch)
        assert cols.values == [b"a", None, "ü".encode(), b""]
        assert cols.keys == [None, b"k", b"", b"kk"]
        expected = [0 if s is None else (s // 1000 * 1000 if unit == "s" else s)
                    for s in stamps]  # fmt: skip
        assert cols.stamps == expected == timestamps_ms(batch)
        assert cols.nbytes == 1 + 2 + 0 + 1 + 2
        assert cols.single_topic()
    with_topic = pa.RecordBatch.from_pydict({"value": [b"x", b"y"], "topic": [None, "other"]})
    assert not RowColumns.of(with_topic).single_topic()
    longs = pa.RecordBatch.from_pydict({"value": [b"x"], "timestamp": pa.array([5], pa.int64())})
    assert timestamps_ms(longs) == [5]
    with pytest.raises(OptionError, match="timestamp"):
        timestamps_ms(pa.RecordBatch.from_pydict({"value": [b"x"], "timestamp": ["now"]}))
