"""The streaming reader: micro-batches bounded by maxOffsetsPerTrigger, in order, a restart
from the checkpoint, new partitions picked up, and every message exactly once in the sink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from spark_bridge_support import create_topic
from support.standalone import Standalone

from spark_bridge.stream_reader import share_limit

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _produce(broker: Standalone, topic: str, start: int, count: int,
             partitions: int) -> set[tuple[int, int]]:  # fmt: skip
    acked: set[tuple[int, int]] = set()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "compression.type": "lz4"})  # fmt: skip
    for i in range(start, start + count):
        producer.produce(topic, value=f"m{i}".encode(), key=f"k{i}".encode(),
                         partition=i % partitions,
                         on_delivery=lambda err, msg: err is None
                         and acked.add((msg.partition(), msg.offset())))  # fmt: skip
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == count
    return acked


def _run(spark: Any, metadata: str, topic: str, out: Path, checkpoint: Path) -> list[dict]:
    stream = (spark.readStream.format("ledgerwire").option("ledgerwire.metadata", metadata)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "700").load())  # fmt: skip
    query = (stream.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="0 seconds").start())  # fmt: skip
    try:
        query.processAllAvailable()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if isinstance(value, str):
        value = json.loads(value)
    return value or {}


def _check_in_order(progress: list[dict]) -> None:
    previous: dict[tuple[str, str], int] = {}
    for p in progress:
        source = p["sources"][0]
        assert p["numInputRows"] <= 700
        start, end = _offsets(source["startOffset"]), _offsets(source["endOffset"])
        for topic, parts in end.items():
            for part, offset in parts.items():
                begin = start.get(topic, {}).get(part, 0)
                assert offset >= begin >= previous.get((topic, part), 0)
                previous[(topic, part)] = offset


def test_stream_restarts_from_its_checkpoint_exactly_once(
        spark: Any, history_broker: Standalone, tmp_path: Path) -> None:  # fmt: skip
    topic = "stream"
    create_topic(history_broker, topic, 2)
    metadata = str(history_broker.data_dir)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    expected = _produce(history_broker, topic, 0, 3000, 2)
    first = _run(spark, metadata, topic, out, checkpoint)
    assert len(first) >= 5  # 3000 offsets at <= 700 per trigger
    _check_in_order(first)

    admin = AdminClient({"bootstrap.servers": history_broker.bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(timeout=30)
    expected |= _produce(history_broker, topic, 3000, 2100, 3)
    second = _run(spark, metadata, topic, out, checkpoint)
    assert second, "the restarted query found the new messages"
    _check_in_order(second)
    assert "2" in _offsets(second[-1]["sources"][0]["endOffset"])[topic]  # new partition read

    table = pq.read_table(out)
    got = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                   strict=True))  # fmt: skip
    assert len(got) == len(set(got)) == len(expected)
    assert set(got) == expected


def test_share_limit_is_proportional_and_always_moves() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 6}
    end = share_limit(start, latest, 110)
    assert end == {("t", 0): 99, ("t", 1): 109, ("t", 2): 6}  # floor shares, and t-2 moves
    assert share_limit(start, latest, 10_000) == latest
