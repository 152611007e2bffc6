"""`spark.read.format("ledgerwire")`: a topic's history, straight from the bookies.

Register once per session with `spark_bridge.register(spark)` (or
`spark.dataSource.register(LedgerwireDataSource)`), then read as with Spark's Kafka source:

    spark.read.format("ledgerwire")
         .option("ledgerwire.metadata", "/var/lib/ledgerwire")   # or zk://host:2181/ledgerwire
         .option("subscribe", "orders")
         .load()

The driver plans (planner.py: topics, offset ranges, one split per ledger); each Spark task
opens its own ledger client and reads its ledgers from the bookies (ledger_access.py), closed
ledgers fully and the open one up to its LAC, decodes the batches (any codec) and yields Arrow
record batches (record_decode.py). No broker is involved anywhere: brokers see no load.

This module must never write to ledgerwire, and never open a ledger with recovery.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from spark_bridge.ledger_access import LedgerAccess, ReadMode, TailRule, resolve_read_mode
from spark_bridge.metadata_access import ConnectionSpec
from spark_bridge.options import parse_reader_options
from spark_bridge.planner import LedgerSplit, plan_batch
from spark_bridge.record_decode import decode_to_arrow, spark_schema_ddl

FORMAT_NAME = "ledgerwire"


def read_split(spec: ConnectionSpec, mode: ReadMode, split: LedgerSplit, *,
               include_headers: bool, read_committed: bool, tail: TailRule = "quorum"
               ) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The rows of one split, as Arrow batches (usable outside Spark too)."""
    with LedgerAccess(spec, mode, tail=tail) as access:

        def chunks(ranges: tuple[tuple[int, int, int], ...]) -> Iterator[list[bytes]]:
            for ledger_id, first, last in ranges:
                chunk = access.chunk_entries(ledger_id)  # ~8 MB per chunk, whatever the batches
                yield from access.iter_chunks(ledger_id, first, last, chunk)

        yield from decode_to_arrow(
            chunks(split.ranges), chunks(split.continuation), split.topic, split.partition,
            split.start, split.end, include_headers=include_headers,
            read_committed=read_committed,
        )


class LedgerwireBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_reader_options(options, streaming=False)
        self.mode = resolve_read_mode(self.opts.spec, self.opts.read_from)

    def partitions(self) -> list[InputPartition]:
        with LedgerAccess(self.opts.spec, self.mode, tail=self.opts.tail_read) as access:
            splits: list[InputPartition] = list(plan_batch(access, self.opts))
        # Spark needs at least one partition; an empty split reads nothing.
        return list(splits) or [LedgerSplit("", 0, 0, 0, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LedgerSplit)
        if not partition.ranges:
            return iter(())
        return read_split(self.opts.spec, self.mode, partition,
                          include_headers=self.opts.include_headers,
                          read_committed=self.opts.read_committed,
                          tail=self.opts.tail_read)  # fmt: skip


class LedgerwireDataSource(DataSource):  # type: ignore[misc]
    """The "ledgerwire" format: batch and streaming reads, and backfill writes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        return spark_schema_ddl(lowered.get("includeheaders", "false").strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return LedgerwireBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_bridge.stream_reader import LedgerwireStreamReader

        return LedgerwireStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        from spark_bridge.writer import LedgerwireBackfillWriter

        return LedgerwireBackfillWriter(dict(self.options), schema, overwrite)
