"""`ledgerwire replay --to DIR` without the JVM in the data path: each task writes its own Parquet.

The driver builds the batch reader (reader.py: the principal is checked there and the password
dropped, exactly as for `spark.read`) and plans its splits; a Spark job with one task per split
then runs `_write_split` in the executors' Python workers: the split is decoded into Arrow record
batches (split_reader.py) and written with pyarrow.parquet to one part file, and only the file's
name and row count go back to the driver. Spark never turns the Arrow batches into rows, so the
JVM's Arrow -> rows -> Parquet write is gone.

The output is what `df.write.parquet(DIR)` wrote before: one flat directory of snappy Parquet
part files with the reader's columns (Spark's Kafka source schema), plus `_SUCCESS`. Exactly
once per record: a part file's name is its split's index, it is written under a hidden name and
renamed into `DIR/_temporary/<job>/` when complete, so a retried or speculative task replaces,
never adds; the driver moves the parts into DIR only after every task succeeded, and removes
what it created if the job fails. Transaction markers are honoured by the reader (read_committed).

Only local paths (no scheme, or file:) take this path; any other Hadoop filesystem URI is
written by Spark as before (`writes_locally`). This module must never write to ledgerwire.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq

from spark_bridge.planner import LedgerSplit
from spark_bridge.reader import LedgerwireBatchReader
from spark_bridge.record_decode import arrow_schema

COMPRESSION = "snappy"  # Spark's own default for Parquet


class TargetExistsError(Exception):
    """The output directory is there and --overwrite was not given."""


def writes_locally(target: str) -> bool:
    """Whether `target` is a local path this module writes (else Spark writes it)."""
    scheme = urlparse(target).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter is a path


def _local_path(target: str) -> Path:
    parsed = urlparse(target)
    return Path(parsed.path if parsed.scheme == "file" else target)


def _write_split(reader: LedgerwireBatchReader, staging: str,
                 item: tuple[int, LedgerSplit]) -> tuple[str, int]:  # fmt: skip
    """(part file name or "", rows): one task's split written to `staging` (executor side)."""
    index, split = item
    name = f"part-{index:05d}.{COMPRESSION}.parquet"
    final = os.path.join(staging, name)
    partial = os.path.join(staging, f".{name}.{uuid.uuid4().hex}.tmp")
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for batch in reader.read(split):
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pq.ParquetWriter(partial, batch.schema, compression=COMPRESSION)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            writer = None
            os.replace(partial, final)  # complete or absent, whatever attempt wrote it
    finally:
        if writer is not None:
            writer.close()
        if os.path.exists(partial):
            os.remove(partial)
    return (name if rows else ""), rows


def replay_to_parquet(spark: Any, options: dict[str, str], target: str, *,
                      overwrite: bool) -> int:  # fmt: skip
    """Write the topic(s) `options` name to the local directory `target`; returns the rows."""
    out = _local_path(target)
    if out.exists():
        if not overwrite:
            raise TargetExistsError(f"path {target} already exists (use --overwrite to "
                                    "replace it)")
        if out.is_dir():
            shutil.rmtree(out)
        else:
            out.unlink()
    reader = LedgerwireBatchReader(dict(options))
    splits = [s for s in reader.partitions() if isinstance(s, LedgerSplit) and s.ranges]
    staging = out / "_temporary" / uuid.uuid4().hex
    staging.mkdir(parents=True)
    try:
        written: list[tuple[str, int]] = []
        if splits:
            job = _Task(reader, str(staging))
            written = (spark.sparkContext.parallelize(list(enumerate(splits)), len(splits))
                       .map(job).collect())  # fmt: skip
        rows = sum(n for _name, n in written)
        names = [name for name, _n in written if name]
        for name in names:
            os.replace(staging / name, out / name)
        if not names:  # an empty topic still gives a readable dataset with its schema
            empty = arrow_schema(reader.opts.include_headers).empty_table()
            pq.write_table(empty, out / f"part-00000.{COMPRESSION}.parquet",
                           compression=COMPRESSION)  # fmt: skip
        shutil.rmtree(out / "_temporary")
        (out / "_SUCCESS").touch()
        return rows
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


class _Task:
    """The function Spark ships to the executors (a class so that it pickles by reference)."""

    def __init__(self, reader: LedgerwireBatchReader, staging: str) -> None:
        self.reader = reader
        self.staging = staging

    def __call__(self, item: tuple[int, LedgerSplit]) -> tuple[str, int]:
        return _write_split(self.reader, self.staging, item)


__all__ = ["TargetExistsError", "replay_to_parquet", "writes_locally"]
