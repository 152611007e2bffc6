"""Backfill through the CLI: 200,000 Parquet rows, the job killed midway and run again; then
confluent-kafka consumes exactly 200,000 messages, keyed rows where Kafka's partitioner puts
them, original timestamps kept. Plus the murmur2 partitioner against librdkafka's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition
from spark_bridge_support import BASE_TS, create_topic
from support.standalone import REPO, Standalone

from spark_bridge.backfill_resume import decode_progress, encode_progress, scan_progress_job
from spark_bridge.cli import backfill_main
from spark_bridge.partitioner import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 200_000
PARTITIONS = 3


def _write_parquet(directory: Path) -> None:
    directory.mkdir()
    per_file = ROWS // 4
    for f in range(4):
        ids = list(range(f * per_file, (f + 1) * per_file))
        table = pa.table({
            "id": pa.array(ids, pa.int64()),
            "user": pa.array([f"user-{i % 4999}" for i in ids]),
            "ts": pa.array([BASE_TS + i * 10 for i in ids], pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")),
            "payload": pa.array([f"event {i}" for i in ids]),
        })
        pq.write_table(table, directory / f"part-{f}.parquet", row_group_size=per_file)


def _high_watermarks(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(PARTITIONS))  # fmt: skip
    finally:
        consumer.close()


def _consume_all(bootstrap: str, topic: str) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "backfill-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)}  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    messages: list[Any] = []
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 300
    while len(done) < PARTITIONS and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() is not None:
                continue
            messages.append((msg.partition(), msg.key(), msg.value(), msg.timestamp()))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
    consumer.close()
    return messages


def test_murmur2_partitioner_matches_librdkafka(history_broker: Standalone) -> None:
    create_topic(history_broker, "keyed", 7)
    placed: dict[bytes, int] = {}
    producer = Producer({"bootstrap.servers": history_broker.bootstrap,
                         "partitioner": "murmur2_random"})  # fmt: skip
    for i in range(300):
        key = f"k{i}-{'x' * (i % 9)}".encode()
        producer.produce("keyed", key=key, value=b"v",
                         on_delivery=lambda err, msg: placed.__setitem__(msg.key(),
                                                                         msg.partition()))
    assert producer.flush(30) == 0
    assert len(placed) == 300
    assert all(partition_for_key(k, 7) == p for k, p in placed.items())


def test_backfill_killed_midway_then_rerun_writes_each_row_once(
        spark: Any, history_broker: Standalone, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    source = tmp_path / "dump"
    _write_parquet(source)
    topic = "backfilled"
    args = ["--from", str(source), "--topic", topic, "--key-column", "user",
            "--timestamp-column", "ts", "--value-column", "payload",
            "--bootstrap-servers", history_broker.bootstrap,
            "--metadata", str(history_broker.data_dir), "--partitions", str(PARTITIONS),
            "--master", "local[2]"]  # fmt: skip
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    log = open(tmp_path / "first-run.log", "wb")
    first = subprocess.Popen(
        [sys.executable, "-c", "import sys; from spark_bridge.cli import backfill_main; "
                               "sys.exit(backfill_main(sys.argv[1:]))", *args],
        cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        written = 0
        while time.monotonic() < deadline and first.poll() is None:
            try:
                written = _high_watermarks(history_broker.bootstrap, topic)
            except Exception:  # noqa: BLE001 - the topic may not exist yet
                written = 0
            if written >= ROWS // 5:
                break
            time.sleep(0.2)
        assert first.poll() is None, (tmp_path / "first-run.log").read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        first.wait()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log.close()
    time.sleep(1)
    interrupted = _high_watermarks(history_broker.bootstrap, topic)
    assert 0 < interrupted < ROWS

    assert backfill_main(args) == 0
    summary = capsys.readouterr().out
    assert "rows already there from an earlier run" in summary

    messages = _consume_all(history_broker.bootstrap, topic)
    assert len(messages) == ROWS
    values = {m[2] for m in messages}
    assert len(values) == ROWS
    for partition, key, value, (ts_type, ts) in messages:
        i = int(value.split(b" ")[1])
        assert key == f"user-{i % 4999}".encode()
        assert partition == partition_for_key(key, PARTITIONS)
        assert ts_type == TIMESTAMP_CREATE_TIME and ts == BASE_TS + i * 10


def test_dataframe_write_round_trips_through_the_reader(spark: Any,
                                                        history_broker: Standalone) -> None:
    """df.write with explicit partitions, null keys, string values and headers; read back
    with the bridge itself."""
    create_topic(history_broker, "roundtrip", 4)
    rows = [(None if i % 3 == 0 else f"k{i}", f"value {i}", i % 4 if i % 5 == 0 else None,
             datetime.fromtimestamp((BASE_TS + i) / 1000, tz=UTC),
             [("source", b"dump"), ("i", str(i).encode())])
            for i in range(500)]  # fmt: skip
    df = spark.createDataFrame(rows, "key string, value string, partition int, "
                                     "timestamp timestamp, "
                                     "headers array<struct<key: string, value: binary>>")
    (df.write.format("ledgerwire").mode("append").option("topic", "roundtrip")
       .option("kafka.bootstrap.servers", history_broker.bootstrap).save())  # fmt: skip
    back = (spark.read.format("ledgerwire")
            .option("ledgerwire.metadata", str(history_broker.data_dir))
            .option("subscribe", "roundtrip").option("includeHeaders", "true").load())  # fmt: skip
    got = {bytes(r["value"]).decode(): r for r in back.collect()}
    assert len(got) == 500
    for key, value, partition, ts, headers in rows:
        r = got[value]
        assert (None if r["key"] is None else bytes(r["key"]).decode()) == key
        expected_partition = partition if partition is not None else (
            partition_for_key(key.encode(), 4) if key is not None else None)
        if expected_partition is not None:
            assert r["partition"] == expected_partition
        assert r["timestamp"].timestamp() == ts.timestamp()
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == headers


def test_backfill_cli_names_a_bad_column(spark: Any, history_broker: Standalone, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "small.parquet"
    pq.write_table(pa.table({"id": [1, 2], "payload": ["a", "b"]}), dump)
    code = backfill_main(["--from", str(dump), "--topic", "small", "--key-column", "user",
                          "--bootstrap-servers", history_broker.bootstrap, "--partitions", "1",
                          "--metadata", str(history_broker.data_dir)])  # fmt: skip
    assert code == 2
    assert "--key-column 'user' is not a column" in capsys.readouterr().err
    code = backfill_main(["--from", str(dump), "--topic", "never-created",
                          "--bootstrap-servers", history_broker.bootstrap,
                          "--metadata", str(history_broker.data_dir)])  # fmt: skip
    assert code == 2
    assert "topic 'never-created' does not exist" in capsys.readouterr().err


@pytest.mark.timeout(900)  # two backfills (four Spark jobs) on a loaded machine
def test_a_rerun_finds_its_progress_with_a_spark_job(
        spark: Any, history_broker: Standalone, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The resume point comes from a Spark job in the executors (backfill_resume.py): a
    finished backfill run again writes nothing; the id scopes the scan."""
    source = tmp_path / "rows.json"
    source.write_text("".join(f'{{"k": "k{i}", "value": "v{i}"}}\n' for i in range(300)))
    args = ["--from", str(source), "--topic", "rerun", "--partitions", "3", "--key-column", "k",
            "--tasks", "2", "--bootstrap-servers", history_broker.bootstrap,
            "--metadata", str(history_broker.data_dir), "--backfill-id", "rerun-1"]  # fmt: skip
    assert backfill_main(args) == 0
    assert "0 rows already there" in capsys.readouterr().out
    assert backfill_main(args) == 0
    assert "300 rows already there" in capsys.readouterr().out
    assert decode_progress(encode_progress({(1, 2): 149, (0, 0): 7})) == {(1, 2): 149, (0, 0): 7}


def test_an_empty_topic_needs_no_scan_job(history_broker: Standalone) -> None:
    """A new topic's first backfill: nothing to read, so no Spark job (spark=None would fail)."""
    create_topic(history_broker, "empty-target", 3)
    options = {"ledgerwire.metadata": str(history_broker.data_dir)}
    assert scan_progress_job(None, options, "empty-target", "any") == {}
