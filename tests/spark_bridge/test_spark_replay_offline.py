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
    assert "replay: 6000 rows" in capsys.readouterr().out


def test_replay_cli_names_a_bad_option(stopped: tuple[Standalone, ProducedTopic],
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       spark: Any) -> None:  # fmt: skip
    broker, _ = stopped
    code = replay_main(["--topic", "nope", "--to", str(tmp_path / "x"), "--metadata",
                        str(broker.data_dir), "--master", "local[2]"])  # fmt: skip
    assert code == 2
    assert "option 'subscribe': unknown topic 'nope'" in capsys.readouterr().err
