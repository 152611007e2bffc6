"""The CLI's progress line (spark_bridge/progress.py): its format, and lines while a job runs."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_bridge.progress import Progress, Snapshot, progress_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_line_has_records_bytes_rate_and_eta() -> None:
    line = progress_line(Snapshot(2_500, 3_000_000, 3, 8), 10_000, 5.0)
    assert line == "2,500/10,000 records, 3.0 MB, 500 records/s, tasks 3/8, ETA 0:00:15"
    assert progress_line(Snapshot(0, 0, 0, 4), 100, 1.0).endswith("ETA ?")
    assert "ETA" not in progress_line(Snapshot(5, 0, 1, 2), None, 1.0)


def test_plain_lines_while_a_job_runs(spark: Any, tmp_path: Path) -> None:
    """Not a terminal (a StringIO): one plain line per interval; with the UI off (the test
    session) the finished tasks' share of the planned total stands in for records."""
    out = io.StringIO()

    def _slow(rows: Iterator[Any]) -> Iterator[Any]:  # nested: pickled by value for workers
        import time

        time.sleep(1.5)
        yield from rows

    df = spark.createDataFrame(spark.sparkContext.parallelize(
        [(i,) for i in range(4)], 2).mapPartitions(_slow), "n long")  # fmt: skip
    with Progress(spark, 4, out, interval_s=0.2):
        df.write.parquet(str(tmp_path / "p"))
    lines = out.getvalue().splitlines()
    assert lines, "no progress line during a multi-second job"
    assert all("/4 records" in line and "tasks " in line for line in lines), lines
    assert "\r" not in out.getvalue()
