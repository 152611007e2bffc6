"""`ledgerwire backfill --from <local Parquet>` without the JVM in the data path.

Spark's Python data source writer gets its rows from the JVM (Parquet -> JVM rows -> Arrow ->
the Python worker) in a job of its own kind whose Python workers a session starts apart from
the ones plain Python jobs use; for a backfill that was most of its time. Here the driver plans
the input from the Parquet footers, and a plain Python job (one task per planned row range, on
the session's ordinary Python workers) reads its rows with pyarrow and hands them, as Arrow
batches, to the same `LedgerwireBackfillWriter.write` a Spark write calls: the producer, the
partition rules, the backfill header and the resume rule are writer.py's, unchanged.

Tasks are the input's rows in order (files sorted by name, then row groups, then rows) cut
into consecutive ranges of `ROWS_PER_TASK` rows (or `--tasks` equal ranges): the plan depends
only on the input, never on the cores, so a re-run numbers every row with the same
(task, row number) and skips what an interrupted run wrote (writer.py's restart rule).

Taken only for input this module reads exactly as Spark would: a local Parquet file, or a
directory of Parquet files (no subdirectories, hidden and `_` files ignored, one schema),
whose value/key columns are string or binary, timestamp a UTC-adjusted timestamp or a long,
partition an integer, and no headers column. Anything else goes through Spark's own read
(`plan_parquet` says None). This module must never write a row the writer's rules would not,
nor read a file twice or skip one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_TASK = 1 << 17  # the plan must never depend on the cores (a re-run numbers rows alike)
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class ParquetPiece:
    """Rows [first, first + count) of one row group of one file."""

    path: str
    row_group: int
    first: int
    count: int


@dataclass(frozen=True)
class ParquetPlan:
    """The input's tasks (each a list of pieces, in row order) and the columns to read, as
    {writer column: input column}."""

    tasks: tuple[tuple[ParquetPiece, ...], ...]
    columns: dict[str, str]
    rows: int


def _local_path(source: str) -> Path | None:
    parsed = urlparse(source)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme in ("",) or len(parsed.scheme) == 1:
        return Path(source)
    return None


def _input_files(path: Path) -> list[Path] | None:
    if path.is_file():
        return [path]
    if not path.is_dir():
        return None
    files = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name.startswith(("_", ".")):
            continue  # Spark ignores these too (_SUCCESS, .crc files, hidden staging)
        if not entry.is_file():
            return None  # partition directories: Spark's partition discovery decides
        files.append(Path(entry.path))
    return files or None


def _column_ok(kind: pa.DataType, role: str) -> bool:
    if role in ("value", "key"):
        return bool(pa.types.is_binary(kind) or pa.types.is_string(kind)
                    or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind))
    if role == "timestamp":  # Spark would read a zoneless one as local time: it decides
        return bool(pa.types.is_int64(kind) or (pa.types.is_timestamp(kind)
                                                and kind.tz is not None))
    if role == "partition":
        return bool(pa.types.is_integer(kind))
    return False


def plan_parquet(source: str, columns: dict[str, str],
                 tasks: int | None = None) -> ParquetPlan | None:  # fmt: skip
    """The plan for reading `source` with pyarrow, or None when Spark must read it.
    `columns` maps the writer's names (value, key, timestamp, partition) to input columns."""
    path = _local_path(source)
    files = _input_files(path) if path is not None else None
    if not files or "value" not in columns or "headers" in columns:
        return None
    try:
        metas = [pq.ParquetFile(f).metadata for f in files]
    except (OSError, pa.ArrowException):
        return None  # not Parquet after all (or unreadable): Spark says what is wrong
    schema = metas[0].schema.to_arrow_schema()
    if any(not m.schema.to_arrow_schema().equals(schema) for m in metas[1:]):
        return None
    for role, name in columns.items():
        if name not in schema.names or not _column_ok(schema.field(name).type, role):
            return None
    groups = [(str(f), g, meta.row_group(g).num_rows)
              for f, meta in zip(files, metas, strict=True)
              for g in range(meta.num_row_groups)]  # fmt: skip
    total = sum(n for _f, _g, n in groups)
    per_task = max(1, -(-total // tasks)) if tasks else ROWS_PER_TASK
    out: list[list[ParquetPiece]] = [[]]
    room = per_task
    for file, group, n in groups:
        at = 0
        while at < n:
            if room == 0:
                out.append([])
                room = per_task
            take = min(room, n - at)
            out[-1].append(ParquetPiece(file, group, at, take))
            at += take
            room -= take
    return ParquetPlan(tuple(tuple(t) for t in out if t), dict(columns), total)


def read_pieces(pieces: tuple[ParquetPiece, ...], columns: dict[str, str]
                ) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """A task's rows as Arrow batches with the writer's column names (value, key, ...), in
    row order; the partition column as int32, the rest as stored."""
    roles = list(columns)
    wanted = list(dict.fromkeys(columns.values()))
    for piece in pieces:
        parquet = pq.ParquetFile(piece.path)
        seen = 0
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[piece.row_group],
                                          columns=wanted, use_threads=False):  # fmt: skip
            start, end = max(piece.first - seen, 0), min(piece.first + piece.count - seen,
                                                          batch.num_rows)
            seen += batch.num_rows
            if end <= start:
                if seen >= piece.first + piece.count:
                    break
                continue
            part = batch.slice(start, end - start)
            arrays = []
            for role in roles:
                array = part.column(columns[role])
                if role == "partition":
                    array = array.cast(pa.int32())
                arrays.append(array)
            yield pa.RecordBatch.from_arrays(arrays, names=roles)
            if seen >= piece.first + piece.count:
                break


class _Task:
    """The function Spark ships to the executors: one planned task's rows through the writer
    (a class so that it pickles by reference)."""

    def __init__(self, writer: Any, plan: ParquetPlan) -> None:
        self.writer = writer
        self.plan = plan

    def __call__(self, index: int) -> Any:
        return self.writer.write(read_pieces(self.plan.tasks[index], self.plan.columns))


def backfill_parquet(spark: Any, plan: ParquetPlan, options: dict[str, str]) -> None:
    """Write the planned input through LedgerwireBackfillWriter with the data source's
    `options`: one Spark task per planned task (its partition id is the writer's task
    number), then the writer's commit on the driver, as a Spark write does."""
    from pyspark.sql.types import StructField, StructType

    from spark_bridge.writer import LedgerwireBackfillWriter

    schema = StructType([StructField(name, _spark_type(name)) for name in plan.columns])
    writer = LedgerwireBackfillWriter(options, schema, False)
    n = len(plan.tasks)
    messages = spark.sparkContext.parallelize(range(n), n).map(_Task(writer, plan)).collect() \
        if n else []  # an input without rows: no job (Spark wants at least one slice)
    writer.commit(messages)


def _spark_type(role: str) -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, TimestampType

    return {"partition": IntegerType(), "timestamp": TimestampType()}.get(role, BinaryType())


__all__ = ["ROWS_PER_TASK", "ParquetPiece", "ParquetPlan", "backfill_parquet", "plan_parquet",
           "read_pieces"]
