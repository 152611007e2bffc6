"""Stored record batches -> rows of Spark's Kafka source schema, as Arrow record batches.

Rows: key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int (0 CreateTime, 1 LogAppendTime), and with includeHeaders
headers array<struct<key string, value binary>>. Control batches never become rows.

read_committed (the default, as the issue asks) follows the transaction markers in the log:
records of a transactional batch are held until their producer's COMMIT (kept) or ABORT
(dropped) marker; rows behind a held transaction wait too, so rows come out in offset order.
A split that ends with a transaction still open keeps reading the partition forward (headers
and markers only, no rows) until the marker appears or the readable end is reached; a
transaction with no marker by then is still open and its rows are left out.

Rows are gathered as references to their stored batches (bulk_decode.BatchRefs) and decoded
into one Arrow batch at a time by the bulk C decoder; where it is missing or refuses a group,
the per-record decoders (batch_columns.Columns) give the same rows.

This module is pure (no I/O): it must never emit a row outside the split's offset range, a
row of an aborted transaction under read_committed, or rows out of offset order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from protocols.kafka.record_batch import (
    CONTROL_COMMIT,
    decode_records,
    parse_control_record,
    parse_header,
)
from spark_bridge import bulk_decode
from spark_bridge.batch_columns import Columns
from spark_bridge.bulk_decode import HEADER_TYPE, BatchRefs, arrow_schema

Rows = Columns | BatchRefs  # decoded rows, or the batches to decode in bulk (bulk_decode.py)

SPARK_SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
                    "timestamp timestamp, timestampType int")
SPARK_HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def spark_schema_ddl(include_headers: bool) -> str:
    return SPARK_SCHEMA_DDL + (SPARK_HEADERS_DDL if include_headers else "")


@dataclass
class _Txn:
    committed: bool | None = None  # None: no marker seen yet


@dataclass
class _Segment:
    rows: Rows
    txn: _Txn | None


def columns_to_arrow(rows: Columns, topic: str, partition: int) -> pa.RecordBatch:
    n = len(rows)
    ts_types = rows.ts_types
    arrays = [
        pa.array(rows.keys, pa.binary()),
        pa.array(rows.values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(rows.offsets, pa.int64()),
        pa.array(rows.timestamps, pa.timestamp("ms", tz="UTC")).cast(
            pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(ts_types[0], pa.int32()), n)
        if n and ts_types.count(ts_types[0]) == n else pa.array(ts_types, pa.int32()),
    ]
    if rows.want_headers:
        arrays.append(pa.array(rows.headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(rows.want_headers))


def rows_to_arrow(rows: Rows, topic: str, partition: int) -> pa.RecordBatch:
    """One Arrow batch of `rows`: in bulk where the C decoder takes them, else per record."""
    if isinstance(rows, BatchRefs):
        batch = rows.decode_bulk(topic, partition)
        if batch is not None:
            return batch
        rows = rows.to_columns()
    return columns_to_arrow(rows, topic, partition)


class PartitionDecoder:
    """Feeds one partition's entries in log order; hands out finished rows in offset order."""

    def __init__(self, start: int, end: int, *, read_committed: bool,
                 include_headers: bool = False) -> None:  # fmt: skip
        self.start = start
        self.end = end
        self.read_committed = read_committed
        self.include_headers = include_headers
        self._open: dict[int, _Txn] = {}     # producer id -> its open transaction
        self._held: deque[_Segment] = deque()

    @property
    def waiting_for_markers(self) -> bool:
        return bool(self._held)

    def feed(self, payload: bytes, out: Rows, *, beyond_split: bool = False) -> None:
        """One stored batch; rows that are ready are appended to `out`. Batches after the
        split's own entries (beyond_split) only resolve held transactions."""
        header = parse_header(payload)
        last = header.base_offset + header.last_offset_delta
        if header.is_control:
            if self.read_committed and header.is_transactional:
                txn = self._open.pop(header.producer_id, None)
                if txn is not None:
                    markers = decode_records(payload)
                    txn.committed = bool(markers) and \
                        parse_control_record(markers[0]).control_type == CONTROL_COMMIT
            self._release(out)
            return
        if beyond_split or header.base_offset >= self.end or last < self.start:
            self._release(out)
            return
        open_txn: _Txn | None = None
        if self.read_committed and header.is_transactional:
            open_txn = self._open.get(header.producer_id)
            if open_txn is None:
                open_txn = self._open[header.producer_id] = _Txn()
        if open_txn is None and not self._held:
            out.add(payload, header, self.start, self.end)
            return
        rows = type(out)(self.include_headers)
        rows.add(payload, header, self.start, self.end)
        self._held.append(_Segment(rows, open_txn))
        self._release(out)

    def _release(self, out: Rows) -> None:
        while self._held:
            head = self._held[0]
            if head.txn is not None and head.txn.committed is None:
                break
            self._held.popleft()
            if head.txn is None or head.txn.committed:
                out.extend(head.rows)  # type: ignore[arg-type]

    def finish(self, out: Rows) -> None:
        """No more entries: transactions still open are left out, everything else released."""
        for segment in self._held:
            if segment.txn is None or segment.txn.committed:
                out.extend(segment.rows)  # type: ignore[arg-type]
        self._held.clear()


def decode_to_arrow(
    entries: Iterable[list[bytes]], continuation: Iterable[list[bytes]], topic: str,
    partition: int, start: int, end: int, *, include_headers: bool, read_committed: bool,
    rows_per_batch: int = 16384,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Decode a split's entry chunks (then, only while transactions are open, the entries
    after it) into Arrow batches of about `rows_per_batch` rows."""
    decoder = PartitionDecoder(start, end, read_committed=read_committed,
                               include_headers=include_headers)  # fmt: skip
    new_rows = BatchRefs if bulk_decode.available() else Columns
    rows: Rows = new_rows(include_headers)
    for chunk in entries:
        for payload in chunk:
            decoder.feed(payload, rows)
        if len(rows) >= rows_per_batch:
            batch = rows_to_arrow(rows, topic, partition)
            if batch.num_rows:
                yield batch
            rows = new_rows(include_headers)
    if decoder.waiting_for_markers:
        for chunk in continuation:
            for payload in chunk:
                decoder.feed(payload, rows, beyond_split=True)
            if not decoder.waiting_for_markers:
                break
    decoder.finish(rows)
    if len(rows):
        batch = rows_to_arrow(rows, topic, partition)
        if batch.num_rows:
            yield batch
