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

Credentials (issue 27): when the options name a SASL principal (authorization.py), the driver
logs in with its password and obtains a Kafka delegation token (job_tokens.py, max lifetime
option ledgerwire.tokenMaxLifetimeMs, 2 h by default); the producer settings Spark ships to the
executors then hold only the token id and HMAC, never the password, and the brokers apply the
principal's ACLs to every produce.  `ledgerwire backfill` obtains the token itself and expires
it when the job ends (it passes ledgerwire.delegationToken=true with the token as user name and
password); a direct `df.write` cannot expire it (the writer Spark ships holds no password), so
its token lives until its max lifetime.  Brokers without delegation tokens refuse the write in
one line unless ledgerwire.executorCredentials=password lets the password go to the executors.

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

from spark_bridge.authorization import read_principal
from spark_bridge.backfill_resume import (
    BACKFILL_HEADER,
    PROGRESS_OPTION,
    Progress,
    decode_progress,
)
from spark_bridge.backfill_rows import RowColumns, fast_partitions, row_partition
from spark_bridge.job_tokens import (
    DEFAULT_MAX_LIFETIME_MS,
    DELEGATION_TOKEN_OPTION,
    EXECUTOR_CREDENTIALS_OPTION,
    TOKEN_LIFETIME_OPTION,
    TOKEN_MECHANISM,
    create_job_token,
    token_client_config,
)
from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
from spark_bridge.metadata_access import (
    METADATA_OPTION,
    ConnectionSpec,
    resolve_connection,
)
from spark_bridge.options import OptionError
from spark_bridge.planner import splits_for_range
from spark_bridge.split_reader import read_split
from spark_bridge.topic_layout import partition_layout, topic_partition_count


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


def executor_producer_config(options: dict[str, str], config: dict[str, Any]
                             ) -> tuple[dict[str, Any], str | None]:  # fmt: skip
    """The producer settings the executors get, and the id of the delegation token they log in
    with (None: no principal, or the password is allowed to go): see the module docstring."""
    lowered = {k.lower(): v for k, v in options.items()}
    mode = lowered.get(EXECUTOR_CREDENTIALS_OPTION.lower(), "token").strip().lower()
    if mode not in ("token", "password"):
        raise OptionError(f"option '{EXECUTOR_CREDENTIALS_OPTION}'={mode!r}: token or password")
    try:
        principal = read_principal(options)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if principal is None or mode == "password":
        return config, None
    if lowered.get(DELEGATION_TOKEN_OPTION.lower(), "").strip().lower() == "true":
        return {k: v for k, v in config.items() if k != "sasl.jaas.config"} | {
            "sasl.mechanism": TOKEN_MECHANISM}, principal.user
    try:
        lifetime = int(lowered.get(TOKEN_LIFETIME_OPTION.lower(), DEFAULT_MAX_LIFETIME_MS))
    except ValueError:
        raise OptionError(f"option '{TOKEN_LIFETIME_OPTION}': milliseconds expected") from None
    token = create_job_token(principal, lifetime)
    return token_client_config(config, token), token.token_id


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
        self.producer_config, self.token_id = executor_producer_config(
            options, _producer_config(options))
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

        def send(topic: str, value: bytes | None, key: bytes | None, partition: int,
                 timestamp: int, headers: list[tuple[str, str | bytes | None]] | None) -> None:
            while True:
                try:
                    produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
                    return
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    raise RuntimeError(f"producing to {topic}: {exc}") from exc

        marker = f"{self.backfill_id}:{task}:".encode() if self.backfill_id is not None \
            else None  # fmt: skip
        row_number = -1
        rows = skipped = nbytes = 0
        for batch in iterator:
            cols = RowColumns.of(batch)
            first = row_number + 1
            topic = self.default_topic
            if topic is not None and cols.single_topic() \
                    and first > resume_upto.get(topic, -1):  # fmt: skip
                # no row of this batch can be skipped: bulk partitions, one tight loop
                parts = fast_partitions(cols, task, first, partitions_of(topic), topic)
                self._send_all(cols, topic, parts, first, marker, producer, send)
                row_number += cols.n
                rows += cols.n
                nbytes += cols.nbytes
            else:
                n, skip, size = self._send_each(cols, task, first, progress, resume_upto,
                                                partitions_of, marker, send)  # fmt: skip
                row_number += cols.n
                rows += n
                skipped += skip
                nbytes += size
            producer.poll(0)
            if errors:
                break
        remaining = producer.flush(300)
        if errors or remaining:
            raise RuntimeError(f"backfill task {task}: {len(errors)} delivery errors "
                               f"({'; '.join(errors)}), {remaining} undelivered")
        return BackfillCommit(task, rows, skipped, nbytes)

    @staticmethod
    def _send_all(cols: RowColumns, topic: str, parts: list[int], first: int,
                  marker: bytes | None, producer: Any, send: Any) -> None:  # fmt: skip
        """Every row of a batch none of whose rows a resume skips: one produce per row, the
        arguments prepared in bulk (RowColumns, fast_partitions)."""
        from confluent_kafka import KafkaException

        n = cols.n
        stamps = cols.stamps if cols.stamps is not None else [0] * n
        if cols.headers is not None:
            headers: list[Any] = [[(h["key"], h["value"]) for h in hs] if hs else []
                                  for hs in cols.headers]  # fmt: skip
            if marker is not None:
                for i, hs in enumerate(headers):
                    hs.append((BACKFILL_HEADER, marker + b"%d" % (first + i)))
            headers = [hs or None for hs in headers]
        elif marker is not None:  # the marker alone: a one-key dict is one object per row
            marks = map(marker.__add__, map(b"%d".__mod__, range(first, first + n)))
            headers = [{BACKFILL_HEADER: m} for m in marks]  # (a list of tuples is two)
        else:
            headers = [None] * n
        produce = producer.produce
        values, keys = cols.values, cols.keys if cols.keys is not None else [None] * n
        pos = 0
        while pos < n:
            try:  # the common case: no Python call between two produce calls
                for i in range(pos, n):
                    pos = i  # where a retry resumes
                    produce(topic, values[i], keys[i], parts[i], timestamp=stamps[i],
                            headers=headers[i])  # fmt: skip
                pos = n
            except BufferError:  # the local queue is full: send() waits for room
                send(topic, values[pos], keys[pos], parts[pos], stamps[pos], headers[pos])
                pos += 1
            except KafkaException as exc:
                raise RuntimeError(f"producing to {topic}: {exc}") from exc

    def _send_each(self, cols: RowColumns, task: int, first: int, progress: dict[str, Progress],
                   resume_upto: dict[str, int], partitions_of: Any, marker: bytes | None,
                   send: Any) -> tuple[int, int, int]:  # fmt: skip
        """Row by row (rows a resume may skip, rows naming their own topic): (rows sent,
        rows skipped, bytes sent)."""
        rows = skipped = nbytes = 0
        keys, topics, parts = cols.keys, cols.topics, cols.partitions
        for i, value in enumerate(cols.values):
            row_number = first + i
            topic = (topics[i] if topics is not None and topics[i] else self.default_topic)
            if topic is None:
                raise OptionError(f"row {row_number} of task {task} has no topic")
            key = keys[i] if keys is not None else None
            resuming = row_number <= resume_upto.get(topic, -1)
            given = parts[i] if parts is not None else None
            partition = row_partition(key, given, row_number, task,
                                      partitions_of(topic), topic, resuming=resuming)  # fmt: skip
            if resuming and row_number <= progress[topic].get((task, partition), -1):
                skipped += 1
                continue
            headers: list[tuple[str, str | bytes | None]] = []
            row_headers = cols.headers[i] if cols.headers is not None else None
            if row_headers:
                headers = [(h["key"], h["value"]) for h in row_headers]  # type: ignore[misc]
            if marker is not None:
                headers.append((BACKFILL_HEADER, marker + b"%d" % row_number))
            send(topic, value, key, partition, cols.stamps[i] if cols.stamps else 0,
                 headers or None)  # fmt: skip
            rows += 1
            nbytes += len(value or b"") + len(key or b"")
        return rows, skipped, nbytes

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
