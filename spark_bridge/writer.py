"""`df.write.format("ledgerwire")`: backfill history into a topic, restartable without duplicates.

Design: through the brokers, with an idempotent Kafka producer (confluent-kafka), not straight
into managed ledgers. A partition has exactly one writer, its owner broker: writing its managed
ledger directly would mean taking ownership (fencing the broker's open ledger and failing its
live producers) and redoing what only the broker does (offset assignment, idempotent producer
state, indexes, tail cache, the high watermark consumers wait on). The broker path keeps the
one-writer rule, stays correct while the topic is live, and costs little: records are batched
(linger, large batches) and compressed (lz4 by default) by the producer, and each Spark task
is its own producer, so throughput scales with executors.

Rows: value (binary or string, required), key, topic, partition, timestamp, headers (all
optional; options "topic" sets a default topic as in Spark's Kafka sink). Timestamps are sent as
CreateTime, so the original times are kept. A row with an explicit partition goes there; a
keyed row goes where Kafka's partitioner puts it (murmur2: librdkafka's "murmur2_random"
computes it in C, partitioner.py the same in Python where the resume check needs it); a row
with neither goes to a partition chosen from its position, deterministically. Delivery
reports come back only for failures (no Python call per delivered row).

Restart rule (option ledgerwire.backfillId): every record carries a header
`ledgerwire.backfill` = "<backfill id>:<task>:<row number>", where task is the Spark partition
of the input and row number its position in that partition. Re-running the job on the same
input reproduces both, and the same target partitions. An idempotent producer never leaves a
gap in one partition (the broker refuses a batch whose sequence does not follow), so what an
interrupted run left in a partition is a PREFIX of what each task sent there. Before writing,
the job reads the topic from the bookies (ledger_access.py, no broker involved), finds for each
(task, partition) the highest row number already there, and each task skips those rows.
`ledgerwire backfill` has the executors find them (backfill_resume.py, a Spark job over the
topic's ledgers) and passes them as the option ledgerwire.backfillProgress; without it the
writer scans on the driver. A
retried task attempt re-reads before it writes. Without a backfill id nothing is skipped, and
the rule covers the option's topic (rows routed to other topics by a topic column are not
checked).

This module must never write a row whose (task, row number, partition) is already in the topic
for the same backfill id, nor write to a partition other than the one the rules above choose.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_bridge.backfill_resume import (
    BACKFILL_HEADER,
    PROGRESS_OPTION,
    Progress,
    decode_progress,
)
from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
from spark_bridge.metadata_access import (
    METADATA_OPTION,
    ConnectionSpec,
    resolve_connection,
)
from spark_bridge.options import OptionError
from spark_bridge.partitioner import partition_for_key
from spark_bridge.planner import splits_for_range
from spark_bridge.split_reader import read_split
from spark_bridge.topic_layout import partition_layout, topic_partition_count

_KEYLESS_RUN = 512  # keyless rows go to one partition in runs, so batches stay large


@dataclass
class BackfillCommit(WriterCommitMessage):  # type: ignore[misc]
    task: int
    rows: int
    skipped: int
    bytes: int


def scan_backfill_progress(spec: ConnectionSpec, topic: str, backfill_id: str,
                           namespace: str = "public/default", *,
                           only_task: int | None = None) -> Progress:  # fmt: skip
    """What earlier runs of `backfill_id` already wrote to `topic`, read from the bookies."""
    mode = resolve_read_mode(spec)
    prefix = f"{backfill_id}:".encode()
    progress: Progress = {}
    with LedgerAccess(spec, mode) as access:
        count = topic_partition_count(access, topic) or 0
        layouts = [partition_layout(access, topic, p, namespace, refresh=True)
                   for p in range(count)]  # fmt: skip
    for layout in layouts:
        with LedgerAccess(spec, mode) as access:
            splits = splits_for_range(access, layout, layout.earliest_offset, layout.end_offset)
        for split in splits:
            for batch in read_split(spec, mode, split, include_headers=True,
                                    read_committed=False):  # fmt: skip
                for headers in batch.column("headers").to_pylist():
                    for header in headers or ():
                        value = header["value"]
                        if header["key"] != BACKFILL_HEADER or not value \
                                or not value.startswith(prefix):  # fmt: skip
                            continue
                        task_text, _, row_text = value[len(prefix):].decode().partition(":")
                        task = int(task_text)
                        if only_task is not None and task != only_task:
                            continue
                        key = (task, layout.partition)
                        row = int(row_text)
                        if row > progress.get(key, -1):
                            progress[key] = row
    return progress


def _timestamps_ms(batch: pa.RecordBatch) -> list[int | None] | None:
    """The timestamp column as epoch milliseconds (timestamp type, or a long of ms)."""
    if "timestamp" not in batch.schema.names:
        return None
    column = batch.column("timestamp")
    if pa.types.is_timestamp(column.type):
        per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
        raw = column.cast(pa.int64()).to_pylist()
        if per_ms == 0.001:
            return [None if v is None else v * 1000 for v in raw]
        return [None if v is None else v // int(per_ms) for v in raw]
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64()).to_pylist()
    raise OptionError(f"column 'timestamp' must be a timestamp or a long (ms), not {column.type}")


def _producer_config(options: dict[str, str]) -> dict[str, Any]:
    lowered = {k.lower(): v for k, v in options.items()}
    bootstrap = lowered.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required to write (backfills go "
                          "through the brokers)")
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": 20,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 200_000,
        "queue.buffering.max.kbytes": 256 * 1024,
        # the delivery callback runs only for failures: no Python call per delivered row
        "delivery.report.only.error": True,
    }
    for key, value in options.items():
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers":
            config[key[len("kafka."):]] = value
    # keyed rows sent without a partition go where Kafka's default partitioner puts them (the
    # murmur2 of partitioner.py, computed by librdkafka in C): not a user's choice
    config["partitioner"] = "murmur2_random"
    return config


class LedgerwireBackfillWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        lowered = {k.lower(): v for k, v in options.items()}
        names = {f.name for f in schema.fields}
        if "value" not in names:
            raise OptionError("column 'value' is required to write to ledgerwire (with optional "
                              "key, topic, partition, timestamp, headers)")
        self.default_topic = lowered.get("topic")
        if self.default_topic is None and "topic" not in names:
            raise OptionError("option 'topic' (or a 'topic' column) is required to write")
        self.producer_config = _producer_config(options)
        self.backfill_id = lowered.get("ledgerwire.backfillid")
        self.namespace = lowered.get("ledgerwire.namespace", "public/default")
        self.summary_path = lowered.get("ledgerwire.summarypath")
        self.spec: ConnectionSpec | None = None
        self.progress: dict[str, Progress] = {}
        if self.backfill_id is not None:
            if not self.backfill_id or ":" in self.backfill_id:
                raise OptionError(f"option 'ledgerwire.backfillId'={self.backfill_id!r}: must be "
                                  "non-empty and contain no ':'")
            try:
                self.spec = resolve_connection(lowered.get(METADATA_OPTION.lower()), lowered)
            except ValueError as exc:
                raise OptionError(f"{exc} (needed to resume a backfill)") from None
            if self.default_topic is None:
                raise OptionError("option 'topic' is required with 'ledgerwire.backfillId'")
            given = lowered.get(PROGRESS_OPTION.lower())
            self.progress[self.default_topic] = decode_progress(given) if given is not None \
                else scan_backfill_progress(self.spec, self.default_topic, self.backfill_id,
                                            self.namespace)  # fmt: skip
        self.started = time.time()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BackfillCommit:
        from confluent_kafka import KafkaException, Producer
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        progress = self.progress
        if context is not None and context.attemptNumber() > 0 and self.spec is not None \
                and self.backfill_id is not None and self.default_topic is not None:  # fmt: skip
            progress = {self.default_topic: scan_backfill_progress(
                self.spec, self.default_topic, self.backfill_id, self.namespace,
                only_task=task)}
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None and len(errors) < 10:
                errors.append(str(err))

        producer = Producer({**self.producer_config, "on_delivery": on_delivery})

        partition_counts: dict[str, int] = {}

        def partitions_of(topic: str) -> int:
            count = partition_counts.get(topic)
            if count is None:
                metadata = producer.list_topics(topic, timeout=30)
                info = metadata.topics.get(topic)
                if info is None or info.error is not None or not info.partitions:
                    raise OptionError(f"option 'topic': topic {topic!r} does not exist "
                                      f"({info.error if info is not None else 'no metadata'})")
                count = partition_counts[topic] = len(info.partitions)
            return count

        # Rows after the highest one an earlier run left for this task cannot be skipped
        # whatever their partition; up to it each row's partition is worked out here.
        resume_upto = {topic: max((row for (t, _p), row in done.items() if t == task),
                                  default=-1)
                       for topic, done in progress.items()}  # fmt: skip
        produce = producer.produce
        row_number = -1
        rows = skipped = nbytes = 0
        for batch in iterator:
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            values = cols["value"]
            keys = cols.get("key")
            topics = cols.get("topic")
            parts = cols.get("partition")
            stamps = _timestamps_ms(batch)
            header_lists = cols.get("headers")
            for i, value in enumerate(values):
                row_number += 1
                topic = (topics[i] if topics is not None and topics[i] else self.default_topic)
                if topic is None:
                    raise OptionError(f"row {row_number} of task {task} has no topic")
                key = keys[i] if keys is not None else None
                if isinstance(key, str):
                    key = key.encode()
                if isinstance(value, str):
                    value = value.encode()
                resuming = row_number <= resume_upto.get(topic, -1)
                partition: int | None
                if parts is not None and parts[i] is not None:
                    partition = int(parts[i])
                    count = partitions_of(topic)
                    if not 0 <= partition < count:
                        raise OptionError(f"column 'partition': {topic} has no partition "
                                          f"{partition} (row {row_number} of task {task})")
                elif key is None:
                    partition = (task + row_number // _KEYLESS_RUN) % partitions_of(topic)
                elif resuming or not key:
                    partition = partition_for_key(key, partitions_of(topic))
                else:
                    partition = None  # librdkafka's murmur2_random: the same partition, in C
                if resuming:
                    assert partition is not None
                    if row_number <= progress[topic].get((task, partition), -1):
                        skipped += 1
                        continue
                headers: list[tuple[str, str | bytes | None]] = []
                if header_lists is not None and header_lists[i]:
                    headers = [(h["key"], h["value"]) for h in header_lists[i]]
                if self.backfill_id is not None:
                    headers.append((BACKFILL_HEADER,
                                    f"{self.backfill_id}:{task}:{row_number}".encode()))
                timestamp = 0
                if stamps is not None:
                    timestamp = stamps[i] or 0
                while True:
                    try:
                        if partition is None:
                            produce(topic, value, key, timestamp=timestamp,
                                    headers=headers or None)
                        else:
                            produce(topic, value, key, partition, timestamp=timestamp,
                                    headers=headers or None)
                        break
                    except BufferError:
                        producer.poll(0.05)
                    except KafkaException as exc:
                        raise RuntimeError(f"producing to {topic}: {exc}") from exc
                rows += 1
                nbytes += len(value or b"") + len(key or b"")
            producer.poll(0)
            if errors:
                break
        remaining = producer.flush(300)
        if errors or remaining:
            raise RuntimeError(f"backfill task {task}: {len(errors)} delivery errors "
                               f"({'; '.join(errors)}), {remaining} undelivered")
        return BackfillCommit(task, rows, skipped, nbytes)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.summary_path:
            return
        done = [m for m in messages if isinstance(m, BackfillCommit)]
        summary = {
            "rows": sum(m.rows for m in done),
            "skipped": sum(m.skipped for m in done),
            "bytes": sum(m.bytes for m in done),
            "tasks": len(done),
            "seconds": round(time.time() - self.started, 3),
        }
        Path(self.summary_path).write_text(json.dumps(summary))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # delivered rows stay; a re-run with the same backfill id skips them
