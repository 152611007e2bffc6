"""The batch reader against a real standalone and real local Spark (Kafka source semantics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spark_bridge_support import BASE_TS, ProducedTopic

from spark_bridge.ledger_access import LedgerAccess
from spark_bridge.options import parse_reader_options
from spark_bridge.planner import LedgerSplit, cut, plan_batch
from spark_bridge.split_reader import read_split

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _read(spark: Any, metadata: str, **options: str) -> Any:
    reader = spark.read.format("ledgerwire").option("ledgerwire.metadata", metadata)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df: Any) -> dict[tuple[int, int], tuple[Any, ...]]:
    out = {}
    for r in df.collect():
        headers = [(h["key"], bytes(h["value"])) for h in r["headers"]] \
            if "headers" in r.__fields__ else None  # fmt: skip
        key = None if r["key"] is None else bytes(r["key"])
        out[(r["partition"], r["offset"])] = (key, bytes(r["value"]), r["timestamp"], headers,
                                              r["topic"], r["timestampType"])  # fmt: skip
    return out


def test_reads_exactly_the_produced_rows(spark: Any, history: ProducedTopic,
                                         metadata_dir: str) -> None:  # fmt: skip
    df = _read(spark, metadata_dir, subscribe=history.topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    got = _rows(df)
    assert len(got) == len(history.rows) == 50_000
    assert set(got) == set(history.rows)
    for position, (key, value, ts, headers) in history.rows.items():
        g_key, g_value, g_ts, g_headers, topic, ts_type = got[position]
        assert (g_key, g_value, g_headers, topic, ts_type) == (key, value, headers,
                                                                history.topic, 0)
        assert int(g_ts.timestamp() * 1000 + 0.5) == ts


def test_plan_follows_ledger_boundaries(history: ProducedTopic, metadata_dir: str) -> None:
    opts = parse_reader_options({"ledgerwire.metadata": metadata_dir,
                                 "subscribe": history.topic})  # fmt: skip
    with LedgerAccess(opts.spec, "bookies") as access:
        splits = plan_batch(access, opts)
    assert len(splits) > 2 * history.partitions  # the topic rolled over several ledgers
    for split in splits:
        assert len(split.ranges) == 1
        assert len({r[0] for r in split.ranges}) == 1
    ledgers = [s.ranges[0][0] for s in splits]
    assert len(ledgers) == len(set(ledgers))  # one split per ledger


def test_min_partitions_splits_further(spark: Any, history: ProducedTopic,
                                       metadata_dir: str) -> None:  # fmt: skip
    plain = _read(spark, metadata_dir, subscribe=history.topic)
    more = _read(spark, metadata_dir, subscribe=history.topic, minPartitions="40")
    assert more.rdd.getNumPartitions() >= 40 > plain.rdd.getNumPartitions()
    assert more.count() == 50_000
    assert more.select("partition", "offset").distinct().count() == 50_000


def test_offset_ranges_select_exactly(spark: Any, history: ProducedTopic,
                                      metadata_dir: str) -> None:  # fmt: skip
    df = _read(spark, metadata_dir, assign=json.dumps({history.topic: [0, 1]}),
               startingOffsets=json.dumps({history.topic: {"0": 123, "1": -2}}),
               endingOffsets=json.dumps({history.topic: {"0": 7001, "1": 4567}}))
    got = {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}
    expected = {(p, o) for p, o in history.rows if (p == 0 and 123 <= o < 7001)
                or (p == 1 and o < 4567)}
    assert got == expected


def test_timestamp_ranges_select_exactly(spark: Any, history: ProducedTopic,
                                         metadata_dir: str) -> None:  # fmt: skip
    start, end = BASE_TS + 10_001, BASE_TS + 23_456
    df = _read(spark, metadata_dir, subscribe=history.topic,
               startingTimestamp=str(start), endingTimestamp=str(end))
    got = {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}
    expected = {pos for pos, row in history.rows.items() if start <= row[2] < end}
    assert got == expected
    by_partition = _read(
        spark, metadata_dir, subscribe=history.topic,
        startingOffsetsByTimestamp=json.dumps({history.topic: {"0": start}}),
        endingOffsetsByTimestamp=json.dumps({history.topic: {"0": end}}))
    got = {(r["partition"], r["offset"])
           for r in by_partition.select("partition", "offset").collect()}
    expected = {pos for pos, row in history.rows.items()
                if pos[0] == 1 or start <= row[2] < end}
    assert got == expected


def test_unknown_topic_is_a_clear_error(spark: Any, history: ProducedTopic,
                                        metadata_dir: str) -> None:  # fmt: skip
    with pytest.raises(Exception, match=r"option 'subscribe': unknown topic 'no-such-topic'"):
        _read(spark, metadata_dir, subscribe="no-such-topic").collect()


def test_range_beyond_the_end_fails_on_data_loss(spark: Any, history: ProducedTopic,
                                                 metadata_dir: str) -> None:  # fmt: skip
    ending = json.dumps({history.topic: {"0": 10_000_000}})
    with pytest.raises(Exception, match=r"option 'endingOffsets': offset 10000000 of history-0 "
                                        r"is beyond the end"):
        _read(spark, metadata_dir, subscribe=history.topic, endingOffsets=ending).collect()
    clamped = _read(spark, metadata_dir, subscribe=history.topic, endingOffsets=ending,
                    failOnDataLoss="false")
    assert clamped.count() == 50_000


@pytest.mark.parametrize(("option", "value", "message"), [
    ("startingOffsets", "{not json", r"option 'startingOffsets': not valid JSON"),
    ("minPartitions", "many", r"option 'minPartitions'='many': expected a positive integer"),
    ("includeHeaders", "maybe", r"option 'includeHeaders'='maybe': expected true or false"),
    ("startingOffsets", "latest", r"option 'startingOffsets': 'latest' is not allowed"),
])
def test_malformed_options_name_the_option(spark: Any, history: ProducedTopic, metadata_dir: str,
                                           option: str, value: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        _read(spark, metadata_dir, subscribe=history.topic, **{option: value}).collect()


def test_missing_metadata_option_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=r"option 'ledgerwire.metadata' is required"):
        spark.read.format("ledgerwire").option("subscribe", "x").load().collect()


def test_large_ledgers_split_by_entry_range(history: ProducedTopic, metadata_dir: str) -> None:
    """A closed ledger larger than ledgerwire.maxSplitBytes is read by several splits of
    consecutive entry ranges that together cover the ledger's split exactly once, and read
    together they give every row once."""
    base = {"ledgerwire.metadata": metadata_dir, "subscribe": history.topic}
    whole_opts = parse_reader_options(base)
    cut_opts = parse_reader_options({**base, "ledgerwire.maxSplitBytes": "4096"})
    with LedgerAccess(whole_opts.spec, "bookies") as access:
        whole = plan_batch(access, whole_opts)
        cut = plan_batch(access, cut_opts)
        sizes = {s.ranges[0][0]: access.entry_bytes(s.ranges[0][0]) for s in whole}
        rows = [(r["partition"], r["offset"]) for s in cut
                for batch in read_split(cut_opts.spec, "bookies", s, include_headers=False,
                                        read_committed=True, access=access)
                for r in batch.select(["partition", "offset"]).to_pylist()]  # fmt: skip
    assert len(cut) > len(whole)
    for split in whole:
        (ledger, first, last), = split.ranges
        pieces = [s.ranges[0] for s in cut if s.ranges[0][0] == ledger]
        assert pieces[0][1] == first and pieces[-1][2] == last
        assert all(a[2] + 1 == b[1] for a, b in zip(pieces, pieces[1:], strict=False))
        per_entry = sizes[ledger]
        if per_entry is None:  # the open ledger: its length is not known, it stays whole
            assert len(pieces) == 1
        else:
            assert len(pieces) >= min(last - first + 1, (last - first + 1) * per_entry // 4096)
            assert all((b - a + 1) * per_entry <= 4096 or a == b for _l, a, b in pieces)
    assert len(rows) == len(set(rows)) == 50_000


def test_cut_gives_consecutive_ranges_reading_on() -> None:
    split = LedgerSplit("t", 0, 0, 100, ((7, 10, 19),), ((8, 0, 5),))
    parts = cut(split, 3)
    assert [p.ranges for p in parts] == [((7, 10, 12),), ((7, 13, 15),), ((7, 16, 19),)]
    assert parts[0].continuation == ((7, 13, 15), (7, 16, 19), (8, 0, 5))
    assert parts[2].continuation == ((8, 0, 5),)
    assert [p.ranges for p in cut(LedgerSplit("t", 0, 0, 1, ((7, 4, 5),)), 9)] == [
        ((7, 4, 4),), ((7, 5, 5),)]
