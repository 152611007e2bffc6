"""The backfill writer's columns, turned into producer arguments in bulk (no per-row Arrow).

`RowColumns.of(batch)` converts an Arrow record batch's columns once per batch: binary and
string columns as bytes lists, timestamps through one int64 cast (never as datetime objects,
which cost more than the produce calls themselves). `fast_partitions` applies, for a whole
batch at once, the partition rules of writer.py to rows that need no resume check: an explicit
partition column, keyless rows in runs, keyed rows left to librdkafka's murmur2 (-1, in C).

Pure and sans-IO: this module must never decide differently from writer.py's per-row rules
(tests/spark_bridge/test_spark_backfill_rows.py checks them side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_bridge.options import OptionError
from spark_bridge.partitioner import partition_for_key

KEYLESS_RUN = 512  # keyless rows go to one partition in runs, so batches stay large
UNASSIGNED = -1  # confluent-kafka's RD_KAFKA_PARTITION_UA: librdkafka's partitioner decides


def _bytes_list(column: pa.Array) -> list[bytes | None]:
    """A binary or string column as bytes (None for nulls)."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    return column.to_pylist()  # type: ignore[no-any-return]


def _total_length(column: pa.Array | None) -> int:
    if column is None or len(column) == 0:
        return 0
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


def timestamps_ms(batch: pa.RecordBatch) -> list[int] | None:
    """The timestamp column as epoch milliseconds (0 for nulls), or None without one."""
    if "timestamp" not in batch.schema.names:
        return None
    column = batch.column("timestamp")
    if pa.types.is_timestamp(column.type):
        raw: list[int] = pc.fill_null(column.cast(pa.int64()), 0).to_pylist()
        unit = column.type.unit
        if unit == "s":
            return [v * 1000 for v in raw]
        if unit == "ms":
            return raw
        per_ms = {"us": 1000, "ns": 1_000_000}[unit]
        return [v // per_ms for v in raw]
    if pa.types.is_integer(column.type):
        return pc.fill_null(column.cast(pa.int64()), 0).to_pylist()  # type: ignore[no-any-return]
    raise OptionError(f"column 'timestamp' must be a timestamp or a long (ms), not {column.type}")


@dataclass
class RowColumns:
    """One batch's columns as Python lists ready for `Producer.produce`."""

    n: int
    values: list[bytes | None]
    keys: list[bytes | None] | None
    topics: list[str | None] | None
    partitions: list[int | None] | None
    stamps: list[int] | None
    headers: list[list[dict[str, object]] | None] | None
    nbytes: int  # value and key bytes of every row

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> RowColumns:
        names = batch.schema.names
        keys = batch.column("key") if "key" in names else None
        values = batch.column("value")
        topics = batch.column("topic").to_pylist() if "topic" in names else None
        parts = batch.column("partition") if "partition" in names else None
        headers = batch.column("headers").to_pylist() if "headers" in names else None
        return cls(
            n=batch.num_rows,
            values=_bytes_list(values),
            keys=_bytes_list(keys) if keys is not None else None,
            topics=topics,
            partitions=parts.to_pylist()
            if parts is not None and parts.null_count < len(parts) else None,
            stamps=timestamps_ms(batch),
            headers=headers,
            nbytes=_total_length(values) + _total_length(keys),
        )

    def single_topic(self) -> bool:
        """No row names a topic of its own (every row goes to the option's topic)."""
        return self.topics is None or not any(self.topics)


def row_partition(key: bytes | None, given: int | None, row_number: int, task: int,
                  count: int, topic: str, *, resuming: bool) -> int:  # fmt: skip
    """One row's target partition (writer.py's rules): an explicit partition (checked against
    `count`), else a keyless row's run partition, else, for a row a resume may skip or an
    empty key, Kafka's murmur2 computed here, else UNASSIGNED (the same murmur2, in C)."""
    if given is not None:
        if not 0 <= given < count:
            raise OptionError(f"column 'partition': {topic} has no partition {given} "
                              f"(row {row_number} of task {task})")
        return int(given)
    if key is None:
        return (task + row_number // KEYLESS_RUN) % count
    if resuming or not key:
        return partition_for_key(key, count)
    return UNASSIGNED


def fast_partitions(rows: RowColumns, task: int, first_row: int, count: int,
                    topic: str) -> list[int]:  # fmt: skip
    """`row_partition` of every row of a batch none of whose rows a resume may skip, worked
    out a list at a time."""
    n = rows.n
    out: list[int] = []
    row = first_row
    while row < first_row + n:  # keyless rows: runs of KEYLESS_RUN rows per partition
        run_end = min(first_row + n, (row // KEYLESS_RUN + 1) * KEYLESS_RUN)
        out.extend([(task + row // KEYLESS_RUN) % count] * (run_end - row))
        row = run_end
    if rows.keys is not None:
        empty = -2  # an empty key: computed once below, if any
        out = [p if k is None else (UNASSIGNED if k else empty)
               for p, k in zip(out, rows.keys, strict=True)]
        if empty in out:
            at = partition_for_key(b"", count)
            out = [at if p == empty else p for p in out]
    if rows.partitions is not None:
        for i, given in enumerate(rows.partitions):
            if given is None:
                continue
            if not 0 <= given < count:
                raise OptionError(f"column 'partition': {topic} has no partition {given} "
                                  f"(row {first_row + i} of task {task})")
            out[i] = int(given)
    return out


__all__ = ["KEYLESS_RUN", "UNASSIGNED", "RowColumns", "fast_partitions", "row_partition",
           "timestamps_ms"]
