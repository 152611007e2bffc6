"""Graceful load transfer: a broker joining takes over its share of bundles, and
`ledgerwire admin drain` moves every bundle off a broker, both under acked idempotent produce
and a consumer group committing offsets, without losing or duplicating a message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import ProduceRun, create_topic, read_topic, verify

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "moves"
PARTITIONS = 6


def wait_acks(run: ProduceRun, count: int, since: float, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while run.acked_since(since) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {run.acked_since(since)} acks; errors {run.errors[-5:]}")
        time.sleep(0.1)


def test_join_then_drain_moves_bundles_without_loss(tmp_path: Path) -> None:
    with Cluster(tmp_path / "c", bookies=3, brokers=1, partitions=PARTITIONS) as cluster:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        run = ProduceRun(cluster.bootstrap, TOPIC, "move").start()
        try:
            wait_acks(run, 300, 0.0)
            joined_at = time.monotonic()
            cluster.add_broker(2)
            owners = cluster.wait_all_bundles_owned(by={1, 2})
            deadline = time.monotonic() + 30
            while set(owners.values()) != {1, 2}:
                assert time.monotonic() < deadline, owners
                time.sleep(0.3)
                owners = cluster.bundle_owners()
            wait_acks(run, 300, joined_at)

            drained_at = time.monotonic()
            drain = cluster.cli("admin", "drain", "1", "--wait", "60")
            assert drain.returncode == 0, drain.stdout + drain.stderr
            assert set(cluster.bundle_owners().values()) == {2}
            wait_acks(run, 300, drained_at)
        finally:
            run.stop()
        assert not run.errors, run.errors[:5]
        verdict = verify(run.acked, read_topic(cluster.bootstrap, TOPIC, PARTITIONS))
        assert verdict.ok, (verdict, cluster.logs())

        # the group coordinators moved too: a group commits and reads its offsets back
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "movers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 60
            msg = None
            while msg is None or msg.error() is not None:
                assert time.monotonic() < deadline
                msg = consumer.poll(1.0)
            committed = consumer.commit(message=msg, asynchronous=False)
            assert committed[0].error is None
        finally:
            consumer.close()
        status = cluster.status()
        assert status["draining"] == [1]
