"""`ledgerwire replay` on a real Spark standalone cluster (a master and two one-core workers
started from the pyspark wheel's spark-class): the Parquet output equals what the producer had
acknowledged, tasks ran on both workers, and the workers' Python had no ledgerwire (the CLI
ships the bridge's zip with the job); backfill is exact and idempotent. Data stays tiny: the
machine is small."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from spark_cluster import SparkCluster, python_without_ledgerwire
from support.standalone import Standalone
from test_spark_cli_errors import assert_no_java, run_cli

# Spark jobs on a loaded machine take longer than the suite's 300 s default
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    running = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def topic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone,
                                                                      ProducedTopic]]:
    broker = start_standalone(tmp_path_factory.mktemp("cluster-data"), max_entries_per_ledger=20)
    try:
        yield broker, produce_history(broker, "spread", 2_000, partitions=4)
    finally:
        broker.stop()


def test_replay_on_two_workers_equals_the_produced_topic(
        cluster: SparkCluster, topic: tuple[Standalone, ProducedTopic], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The workers' Python cannot import ledgerwire: the code the CLI ships runs there."""
    broker, produced = topic
    wrapper, ran = python_without_ledgerwire(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", str(wrapper))  # the workers share this host
    target = tmp_path / "out"
    code, out, err, _s = run_cli(
        "replay", "--topic", "spread", "--to", str(target), "--metadata", str(broker.data_dir),
        "--master", cluster.master, "--no-ui", "--min-partitions", "8",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
        "--include-headers", timeout_s=600, cwd=tmp_path)  # fmt: skip
    assert code == 0, err
    assert_no_java(err)
    assert "replay: 2000 rows" in out
    table = pq.read_table(target)
    got = {(p, o): (None if k is None else bytes(k), bytes(v)) for p, o, k, v in zip(
        table.column("partition").to_pylist(), table.column("offset").to_pylist(),
        table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)}
    assert got == {pos: (row[0], row[1]) for pos, row in produced.rows.items()}
    assert ran.exists()  # the executors' Python workers were the wrapper
    per_worker = cluster.tasks_per_worker()
    assert all(n > 0 for n in per_worker), per_worker
    assert os.path.isdir(target)


def _drain_count(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        topic, timeout=30).topics[topic].partitions  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        count, eof = 0, set()
        deadline = time.monotonic() + 120
        while len(eof) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                eof.add(msg.partition())
                continue
            count += 1
        return count
    finally:
        consumer.close()


def test_backfill_on_two_workers_is_exact_and_idempotent(
        cluster: SparkCluster, topic: tuple[Standalone, ProducedTopic], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    broker, _ = topic
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    source = tmp_path / "rows.json"
    source.write_text("".join(f'{{"k": "k{i}", "value": "v{i}"}}\n' for i in range(300)))
    args = ["backfill", "--from", str(source), "--topic", "filled", "--partitions", "2",
            "--key-column", "k", "--tasks", "4", "--bootstrap-servers", broker.bootstrap,
            "--metadata", str(broker.data_dir), "--master", cluster.master, "--no-ui",
            "--conf", "spark.executor.memory=512m"]  # fmt: skip
    for _ in range(2):
        code, out, err, _s = run_cli(*args, timeout_s=600, cwd=tmp_path)
        assert code == 0, err
        assert_no_java(err)
    assert "300 rows already there" in out
    assert _drain_count(broker.bootstrap, "filled") == 300
