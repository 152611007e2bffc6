"""`ledgerwire replay --to DIR` without the JVM in the data path: each task writes its own Parquet.

The driver builds the batch reader (reader.py: the principal is checked there and the password
dropped, exactly as for `spark.read`) and plans its splits; the splits are dealt into about one
group per core (`deal`, largest first onto the lightest group: one task per ledger made many
short tasks, each opening its own ledger client), and a Spark job with one task per group runs
`_write_group` in the executors' Python workers (a topic with fewer splits than cores has its
largest splits halved by entry range first, so every core reads): each split of the group is
decoded into Arrow record batches (split_reader.py, one ledger client for the whole group) and
written with pyarrow.parquet to its own part file, and only the files' names and row counts go
back to the driver. Spark never turns the Arrow batches into rows, so the JVM's Arrow -> rows ->
Parquet write is gone.

The output is what `df.write.parquet(DIR)` wrote before: one flat directory of snappy Parquet
part files with the reader's columns (Spark's Kafka source schema), plus `_SUCCESS`. Exactly
once per record: a part file's name is its split's index (whichever task wrote it), it is
written under a hidden name and renamed into `DIR/_temporary/<job>/` when complete, so a
retried or speculative task replaces, never adds; the driver moves the parts into DIR only
after every task succeeded, and removes what it created if the job fails. Transaction markers
are honoured by the reader (read_committed).

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

from ledger_backend.client.errors import LedgerError
from spark_bridge.ledger_access import LedgerAccess, mode_on_this_host, not_here_hint
from spark_bridge.planner import LedgerSplit, apply_min_partitions
from spark_bridge.reader import LedgerwireBatchReader
from spark_bridge.record_decode import arrow_schema
from spark_bridge.split_reader import read_split

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


def local_bytes(target: str) -> int:
    """Bytes of the files under the local output `target` (what Hadoop's content summary
    counts, without a JVM round trip)."""
    root = _local_path(target)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def deal(splits: list[LedgerSplit], groups: int) -> list[list[tuple[int, LedgerSplit]]]:
    """(index, split) pairs dealt into at most `groups` non-empty groups of similar entry
    counts: the largest split first, each onto the group with the fewest entries so far."""
    count = max(1, min(groups, len(splits)))
    loads = [0] * count
    out: list[list[tuple[int, LedgerSplit]]] = [[] for _ in range(count)]
    for index, split in sorted(enumerate(splits), key=lambda item: -item[1].entries):
        lightest = loads.index(min(loads))
        out[lightest].append((index, split))
        loads[lightest] += max(1, split.entries)
    return [sorted(group, key=lambda item: item[0]) for group in out if group]


def _write_split(reader: LedgerwireBatchReader, staging: str, item: tuple[int, LedgerSplit],
                 access: LedgerAccess | None = None) -> tuple[str, int]:  # fmt: skip
    """(part file name or "", rows): one split written to `staging` (executor side)."""
    index, split = item
    name = f"part-{index:05d}.{COMPRESSION}.parquet"
    final = os.path.join(staging, name)
    partial = os.path.join(staging, f".{name}.{uuid.uuid4().hex}.tmp")
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for batch in read_split(reader.opts.spec, reader.mode, split,
                                include_headers=reader.opts.include_headers,
                                read_committed=reader.opts.read_committed,
                                tail=reader.opts.tail_read, access=access):  # fmt: skip
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


def _write_group(reader: LedgerwireBatchReader, staging: str,
                 group: list[tuple[int, LedgerSplit]]) -> list[tuple[str, int]]:  # fmt: skip
    """One task: its splits in turn, through one ledger client."""
    opts = reader.opts
    here = mode_on_this_host(opts.spec, reader.mode)  # "files" only where the files are
    try:
        with LedgerAccess(opts.spec, here, tail=opts.tail_read,  # splits carry metadata
                          shipped=() if here == "bookies" else None) as access:
            return [_write_split(reader, staging, item, access) for item in group]
    except LedgerError as exc:
        if here == reader.mode:
            raise
        raise LedgerError(f"{exc}; {not_here_hint(opts.spec)}") from exc


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
            cores = spark.sparkContext.defaultParallelism  # fewer splits than cores: halved
            groups = deal(apply_min_partitions(splits, cores), cores)
            job = _Task(reader, str(staging))
            written = [part for parts in spark.sparkContext.parallelize(groups, len(groups))
                       .map(job).collect() for part in parts]  # fmt: skip
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

    def __call__(self, group: list[tuple[int, LedgerSplit]]) -> list[tuple[str, int]]:
        return _write_group(self.reader, self.staging, group)


__all__ = ["TargetExistsError", "deal", "local_bytes", "replay_to_parquet", "writes_locally"]
