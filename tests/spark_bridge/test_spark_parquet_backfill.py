"""The backfill's pyarrow input plan (parquet_backfill.py), no JVM: every input row lands in
exactly one task, in input order, with the writer's column names; inputs Spark must read
itself (partition directories, other column types, zoneless timestamps, headers) are left to
Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_bridge.parquet_backfill import plan_parquet, read_pieces

COLUMNS = {"value": "payload", "key": "user", "timestamp": "ts", "partition": "p"}


def _write(directory: Path, files: int = 3, rows: int = 1000, group: int = 300) -> list[int]:
    directory.mkdir(exist_ok=True)
    ids: list[int] = []
    for f in range(files):
        part = list(range(f * rows, (f + 1) * rows))
        ids += part
        table = pa.table({
            "id": pa.array(part, pa.int64()),
            "user": pa.array([f"user-{i % 7}" for i in part]),
            "ts": pa.array([1_700_000_000_000 + i for i in part], pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")),
            "payload": pa.array([b"v%d" % i for i in part], pa.binary()),
            "p": pa.array([i % 3 for i in part], pa.int64()),
        })
        pq.write_table(table, directory / f"part-{f}.parquet", row_group_size=group)
    (directory / "_SUCCESS").touch()
    (directory / ".part-0.parquet.crc").write_bytes(b"not parquet")
    return ids


@pytest.mark.parametrize("tasks", [None, 1, 4, 7, 5000])
def test_plan_covers_every_row_once_in_order(tmp_path: Path, tasks: int | None) -> None:
    ids = _write(tmp_path / "in")
    plan = plan_parquet(str(tmp_path / "in"), COLUMNS, tasks)
    assert plan is not None and plan.rows == len(ids)
    if tasks is not None:
        assert len(plan.tasks) == min(tasks, len(ids))
    values: list[bytes] = []
    for pieces in plan.tasks:
        for batch in read_pieces(pieces, plan.columns):
            assert batch.schema.names == list(COLUMNS)
            assert batch.schema.field("partition").type == pa.int32()
            values += batch.column("value").to_pylist()
    assert values == [b"v%d" % i for i in ids]


def test_plan_does_not_depend_on_anything_but_the_input(tmp_path: Path) -> None:
    _write(tmp_path / "in")
    assert plan_parquet(str(tmp_path / "in"), COLUMNS) == plan_parquet(
        "file://" + str(tmp_path / "in"), COLUMNS)  # same pieces, same task numbers


def test_an_input_without_rows_plans_no_task(tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"payload": pa.array([], pa.binary())}), empty)
    plan = plan_parquet(str(empty), {"value": "payload"})
    assert plan is not None and plan.tasks == () and plan.rows == 0


def test_inputs_spark_must_read_are_left_to_it(tmp_path: Path) -> None:
    source = tmp_path / "in"
    _write(source)
    assert plan_parquet(str(source), {**COLUMNS, "key": "missing"}) is None
    assert plan_parquet(str(source), {**COLUMNS, "value": "id"}) is None  # Spark casts it
    assert plan_parquet(str(source), {**COLUMNS, "headers": "user"}) is None
    assert plan_parquet(str(source), {"key": "user"}) is None  # value from to_json
    assert plan_parquet("hdfs://nn/in", COLUMNS) is None
    naive = tmp_path / "naive.parquet"
    pq.write_table(pa.table({"payload": [b"x"], "ts": pa.array([1], pa.timestamp("ms"))}),
                   naive)  # fmt: skip
    assert plan_parquet(str(naive), {"value": "payload", "timestamp": "ts"}) is None
    assert plan_parquet(str(naive), {"value": "payload"}) is not None
    (source / "day=1").mkdir()  # partition discovery
    assert plan_parquet(str(source), COLUMNS) is None
    other = tmp_path / "mixed"
    _write(other, files=1)
    pq.write_table(pa.table({"payload": [b"x"]}), other / "part-9.parquet")
    assert plan_parquet(str(other), {"value": "payload"}) is None  # two schemas
