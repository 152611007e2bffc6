"""Replay with the broker process stopped: the reader falls back to the bookie directories.
Also the `ledgerwire replay` CLI function, and the read-only metadata view."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from support.standalone import Standalone

from spark_bridge.cli import replay_main
from spark_bridge.ledger_access import resolve_read_mode
from spark_bridge.metadata_access import resolve_connection
from spark_bridge.parquet_replay import (
    TargetExistsError,
    _write_split,
    deal,
    replay_to_parquet,
    writes_locally,
)
from spark_bridge.planner import LedgerSplit
from spark_bridge.reader import LedgerwireBatchReader

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone,
                                                                        ProducedTopic]]:
    broker = start_standalone(tmp_path_factory.mktemp("offline"), max_entries_per_ledger=25)
    try:
        produced = produce_history(broker, "offline", 6_000, partitions=3)
        spec = resolve_connection(str(broker.data_dir))
        assert resolve_read_mode(spec) == "bookies"  # running: its bookies answer
    finally:
        assert broker.stop() == 0
    yield broker, produced


def test_reads_every_row_from_the_bookie_files(spark: Any, stopped: tuple[Standalone,
                                                                          ProducedTopic]) -> None:
    broker, produced = stopped
    spec = resolve_connection(str(broker.data_dir))
    assert resolve_read_mode(spec) == "files"  # stopped: nobody answers on the bookie ports
    df = (spark.read.format("ledgerwire").option("ledgerwire.metadata", str(broker.data_dir))
          .option("subscribe", "offline").option("includeHeaders", "true").load())  # fmt: skip
    got = {(r["partition"], r["offset"]): (None if r["key"] is None else bytes(r["key"]),
                                           bytes(r["value"]))
           for r in df.collect()}  # fmt: skip
    assert got == {pos: (row[0], row[1]) for pos, row in produced.rows.items()}


def test_replay_cli_writes_parquet(stopped: tuple[Standalone, ProducedTopic], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str], spark: Any) -> None:
    broker, produced = stopped
    target = tmp_path / "out"
    code = replay_main(["--topic", "offline", "--to", str(target), "--metadata",
                        str(broker.data_dir), "--master", "local[2]"])  # fmt: skip
    assert code == 0
    table = pq.read_table(target)
    assert table.num_rows == len(produced.rows)
    assert set(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                   strict=True)) == set(produced.rows)
    written = sum(p.stat().st_size for p in target.iterdir())  # the parts and _SUCCESS
    out = capsys.readouterr().out
    # the summary says what its size measures (compressed files, not the data read), in MiB
    assert out.startswith("replay: 6000 rows in "), out
    assert f"; Parquet files on disk: {written / (1 << 20):.1f} MiB (" in out, out


def test_replay_cli_names_a_bad_option(stopped: tuple[Standalone, ProducedTopic],
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       spark: Any) -> None:  # fmt: skip
    broker, _ = stopped
    code = replay_main(["--topic", "nope", "--to", str(tmp_path / "x"), "--metadata",
                        str(broker.data_dir), "--master", "local[2]"])  # fmt: skip
    assert code == 2
    assert "option 'subscribe': unknown topic 'nope'" in capsys.readouterr().err


def test_replay_parts_equal_sparks_own_parquet_write(
        spark: Any, stopped: tuple[Standalone, ProducedTopic], tmp_path: Path) -> None:  # fmt: skip
    """The pyarrow part files (each task writes its own) read back in Spark with the schema and
    rows Spark's own write of the same read gives; no staging is left, _SUCCESS is there."""
    broker, produced = stopped
    options = {"ledgerwire.metadata": str(broker.data_dir), "subscribe": "offline",
               "includeHeaders": "true"}
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert replay_to_parquet(spark, options, str(ours), overwrite=False) == len(produced.rows)
    spark.read.format("ledgerwire").options(**options).load().write.parquet(str(theirs))
    a, b = spark.read.parquet(str(ours)), spark.read.parquet(str(theirs))
    assert a.schema == b.schema
    def by_position(df: Any) -> list[Any]:
        return sorted(df.collect(), key=lambda r: (r["partition"], r["offset"]))

    assert by_position(a) == by_position(b)
    assert sorted(p.name for p in ours.iterdir() if not p.name.startswith("part-")) == [
        "_SUCCESS"]
    with pytest.raises(TargetExistsError):
        replay_to_parquet(spark, options, str(ours), overwrite=False)
    assert replay_to_parquet(spark, options, str(ours), overwrite=True) == len(produced.rows)
    assert spark.read.parquet(str(ours)).count() == len(produced.rows)


def test_a_retried_task_replaces_its_part(stopped: tuple[Standalone, ProducedTopic],
                                          tmp_path: Path) -> None:  # fmt: skip
    """Exactly once: a split's part file is named for the split, so a second attempt of the same
    task (retry, speculation) replaces the first one's file instead of adding rows."""
    broker, _ = stopped
    reader = LedgerwireBatchReader({"ledgerwire.metadata": str(broker.data_dir),
                                    "subscribe": "offline"})
    split = next(s for s in reader.partitions() if isinstance(s, LedgerSplit) and s.ranges)
    out = tmp_path / "out"  # tmp_path also holds the test's temp directory (conftest.py)
    out.mkdir()
    first = _write_split(reader, str(out), (3, split))
    second = _write_split(reader, str(out), (3, split))
    assert first == second and first[1] > 0
    assert [p.name for p in out.iterdir()] == [first[0]]  # no partial file either
    assert pq.read_table(out / first[0]).num_rows == first[1]


def test_only_local_targets_are_written_by_the_tasks() -> None:
    assert writes_locally("/data/out") and writes_locally("file:///data/out")
    assert writes_locally("relative/out")
    assert not writes_locally("s3a://bucket/out") and not writes_locally("hdfs://nn/out")


def test_splits_are_dealt_into_even_groups_each_once() -> None:
    sizes = [10, 1, 7, 3, 3, 9, 2, 0]
    splits = [LedgerSplit("t", 0, 0, 0, ((i, 0, n - 1),) if n else ()) for i, n in
              enumerate(sizes)]  # fmt: skip
    groups = deal(splits, 3)
    assert len(groups) == 3
    dealt = sorted(index for group in groups for index, _split in group)
    assert dealt == list(range(len(sizes)))
    for group in groups:
        assert [i for i, _s in group] == sorted(i for i, _s in group)
        assert all(splits[i] is split for i, split in group)
    loads = sorted(sum(sizes[i] for i, _s in group) for group in groups)
    assert loads == [11, 12, 12]
    assert [len(g) for g in deal(splits[:2], 8)] == [1, 1]  # never an empty group
    assert deal(splits[:1], 0) == [[(0, splits[0])]]
