"""Where an interrupted backfill left off, found by a Spark job over the target topic.

The writer's restart rule (writer.py) needs, per (input task, target partition), the highest
row number an earlier run with the same backfill id already wrote. `scan_progress_job` asks
Spark for it: the "ledgerwire" reader reads the topic with its headers (one task per ledger, in
the executors, from the bookies), keeps the `ledgerwire.backfill` headers of this id and
reduces them to the maxima, so the driver receives a few numbers instead of reading the whole
topic itself. `ledgerwire backfill` runs it before the write and hands the result to the
writer as the option `ledgerwire.backfillProgress` (encode_progress / decode_progress).

This module must never write to ledgerwire.
"""

from __future__ import annotations

import json
from typing import Any

from spark_bridge.options import OptionError

BACKFILL_HEADER = "ledgerwire.backfill"
PROGRESS_OPTION = "ledgerwire.backfillProgress"

Progress = dict[tuple[int, int], int]  # (task, target partition) -> highest row number present


def scan_progress_job(spark: Any, reader_options: dict[str, str], topic: str,
                      backfill_id: str) -> Progress:  # fmt: skip
    """The progress of `backfill_id` in `topic`, computed by the executors (no job at all when
    the topic has nothing to read: a new topic's first backfill)."""
    from pyspark.sql import functions as F

    options = {**reader_options, "subscribe": topic, "includeHeaders": "true",
               "kafka.isolation.level": "read_uncommitted"}  # fmt: skip
    if _nothing_to_read(options):
        return {}
    df = spark.read.format("ledgerwire").options(**options).load()
    marks = (df.select("partition", F.explode("headers").alias("h"))
               .where(F.col("h.key") == BACKFILL_HEADER)
               .select("partition", F.split(F.col("h.value").cast("string"), ":").alias("m"))
               .where((F.size("m") == 3) & (F.col("m")[0] == backfill_id))
               .select(F.col("m")[1].cast("int").alias("task"), "partition",
                       F.col("m")[2].cast("long").alias("row"))
               .groupBy("task", "partition").agg(F.max("row").alias("row")))  # fmt: skip
    return {(int(r["task"]), int(r["partition"])): int(r["row"]) for r in marks.collect()}


def _nothing_to_read(options: dict[str, str]) -> bool:
    """Whether the read the scan job would run plans no entry at all (planned on the driver by
    the same reader, which checks the principal first)."""
    from spark_bridge.planner import LedgerSplit
    from spark_bridge.reader import LedgerwireBatchReader

    splits = LedgerwireBatchReader(dict(options)).partitions()
    return not any(isinstance(s, LedgerSplit) and s.ranges for s in splits)


def encode_progress(progress: Progress) -> str:
    return json.dumps(sorted([t, p, row] for (t, p), row in progress.items()))


def decode_progress(text: str) -> Progress:
    try:
        items = json.loads(text)
        return {(int(t), int(p)): int(row) for t, p, row in items}
    except (ValueError, TypeError) as exc:
        raise OptionError(f"option '{PROGRESS_OPTION}': expected [[task, partition, row], ...] "
                          f"({exc})") from None


__all__ = ["BACKFILL_HEADER", "PROGRESS_OPTION", "Progress", "decode_progress",
           "encode_progress", "scan_progress_job"]
