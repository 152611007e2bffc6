"""`spark.read.format("ledgerwire")`: a topic's history, straight from the bookies.

Register once per session with `spark_bridge.register(spark)` (or
`spark.dataSource.register(LedgerwireDataSource)` from source.py), then read as with Spark's
Kafka source:

    spark.read.format("ledgerwire")
         .option("ledgerwire.metadata", "/var/lib/ledgerwire")   # or zk://host:2181/ledgerwire
         .option("subscribe", "orders")
         .load()

The driver plans (planner.py: topics, offset ranges, one split per ledger); each Spark task
opens its own ledger client and reads its ledgers from the bookies (ledger_access.py), closed
ledgers fully and the open one up to its LAC, decodes the batches (any codec) and yields Arrow
record batches (split_reader.py, record_decode.py). No broker is involved anywhere: brokers see
no load.

This module must never write to ledgerwire, and never open a ledger with recovery.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ledger_backend.metadata.zk_url import redact
from spark_bridge.authorization import check_read_access
from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
from spark_bridge.options import parse_reader_options
from spark_bridge.planner import LedgerSplit, plan_batch, resolve_topic_partitions
from spark_bridge.read_tickets import obtain_read_ticket
from spark_bridge.split_reader import read_split


class LedgerwireBatchReader(DataSourceReader):  # type: ignore[misc]
    """Spark pickles this object for the executors right after __init__ (before
    `partitions()`), so a job with a principal is authorized here, on the driver, and keeps
    no password: with `ledgerwire.adminUrl` its executors read with a read ticket only."""

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_reader_options(options, streaming=False)
        self.mode = resolve_read_mode(self.opts.spec, self.opts.read_from)
        principal = self.opts.principal
        if principal is not None:  # the brokers' ACLs decide, before any read
            with LedgerAccess(self.opts.spec, self.mode, tail=self.opts.tail_read) as access:
                topics = sorted({t for t, _p in resolve_topic_partitions(access, self.opts)})
            check_read_access(principal, topics)
            spec = self.opts.spec
            if self.opts.admin_url is not None and self.mode == "bookies":
                ticket = obtain_read_ticket(self.opts.admin_url, principal, topics,
                                            self.opts.ticket_ttl_s)  # fmt: skip
                if ticket is not None:  # the ticket replaces the secret, here and there
                    spec = replace(spec, read_ticket=ticket, bookie_secret_file=None)
            self.opts = replace(self.opts, principal=None, spec=spec)

    def __getstate__(self) -> dict[str, object]:
        """With a ticket, executors read only bookies (splits carry their ledgers' metadata):
        they get the metadata address without its password."""
        state = dict(self.__dict__)
        if self.opts.spec.read_ticket is not None:
            state["opts"] = replace(self.opts, spec=replace(
                self.opts.spec, metadata_url=redact(self.opts.spec.metadata_url)))
        return state

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
