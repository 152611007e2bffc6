"""Geo-replication between two real standalones, both ways, under confluent-kafka traffic."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.replication.geo_pair import (
    PARTITIONS,
    TOPIC,
    assert_replicated,
    drained,
    produce,
    read_all,
    start_pair,
    status,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_both_ways_once_in_order_no_loops_and_a_group_moves(tmp_path: Path) -> None:
    east, west = start_pair(tmp_path)
    try:
        produce(east, "east", 300)
        produce(west, "west", 300)
        # an aborted transaction in east never crosses
        txn = Producer({"bootstrap.servers": east.bootstrap, "transactional.id": "geo-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(10):
            txn.produce(TOPIC, value=b"aborted-%d" % i, partition=i % PARTITIONS)
        txn.flush(30)
        txn.abort_transaction(30)
        produce(east, "east2", 50)
        wait_for(lambda: drained(east) and drained(west), "both sides to drain")
        in_east, in_west = read_all(east), read_all(west)
        assert_replicated(in_east, in_west, "east")
        assert_replicated(in_west, in_east, "west")
        for messages in (in_east, in_west):  # every message once on each side, nothing looped
            assert len(messages) == 650
            assert not any(m.value and m.value.startswith(b"aborted") for m in messages)
        shown = east.admin("replication", "status")  # the CLI, as an operator runs it
        assert shown["cluster"] == "east"
        assert {(r["remote"], r["topic"], r["partition"]) for r in shown["partitions"]} == {
            ("west", TOPIC, p) for p in range(PARTITIONS)}
        assert sum(r["sent_total"] for r in shown["partitions"]) == 350
        url = f"http://127.0.0.1:{east.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            metrics = answer.read().decode()
        for name in ("ledgerwire_replication_backlog_messages",
                     "ledgerwire_replication_lag_seconds", "ledgerwire_replication_sent_total"):
            assert f'{name}{{partition="0",remote="west",topic="{TOPIC}"}}' in metrics, name

        # a group reads in east, stops; the next messages must not be skipped in west
        group = {"bootstrap.servers": east.bootstrap, "group.id": "movers",
                 "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        consumer = Consumer(group)
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen_east: list[bytes | None] = []  # (a record's value may be null)
        while len(seen_east) < 650:
            seen_east += [m.value() for m in consumer.consume(1000, 1.0) if m.error() is None]
        consumer.commit(asynchronous=False)
        consumer.close()
        produce(east, "late", 40)
        wait_for(lambda: drained(east), "east to drain the late messages")
        moved = Consumer({**group, "bootstrap.servers": west.bootstrap})
        wanted = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        wait_for(lambda: all(tp.offset >= 0 for tp in moved.committed(wanted, timeout=10)),
                 "the group's offsets to be pushed to west")
        moved.assign(moved.committed(wanted, timeout=10))
        seen_west: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen_west += [m.value() for m in moved.consume(1000, 1.0) if m.error() is None]
            if {b"late-%06d" % i for i in range(40)} <= set(seen_west):
                break
        moved.close()
        assert {b"late-%06d" % i for i in range(40)} <= set(seen_west)
        reread = len(seen_west) - 40
        assert reread < 650, f"translation re-read {reread} messages: no better than earliest"
        print(f"group moved east -> west: re-read {reread} already consumed messages")
    finally:
        east.stop()
        west.stop()


def test_kill9_of_a_replicating_standalone_and_a_remote_outage(tmp_path: Path) -> None:
    """With every stored batch forwarded whole (the threshold at 0: these batches are small), so
    that the kill lands among forwarded batches in flight."""
    east, west = start_pair(tmp_path, forward_min_bytes=0)
    try:
        produce(east, "warm", 100)
        stop = threading.Event()
        acked: list[bytes] = []
        errors: list[str] = []

        def keep_producing() -> None:
            producer = Producer({"bootstrap.servers": east.bootstrap, "acks": "all",
                                 "linger.ms": 2, "message.timeout.ms": 4000, "retries": 0})

            def done(err: object, msg: object) -> None:
                if err is None:
                    acked.append(msg.value())  # type: ignore[attr-defined]
                else:
                    errors.append(str(err))
            i = 0
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, value=b"live-%07d" % i, partition=i % PARTITIONS,
                                     on_delivery=done)
                    i += 1
                except BufferError:
                    pass
                producer.poll(0.001 if i % 50 else 0.01)
            producer.flush(10)

        thread = threading.Thread(target=keep_producing)
        thread.start()
        try:
            wait_for(lambda: len(acked) > 1500, "traffic to flow", 60)
            east.kill()  # SIGKILL while the replicator sends
        finally:
            stop.set()
            thread.join(30)
        east.start()
        wait_for(lambda: drained(east), "east to drain after its restart")
        in_east, in_west = read_all(east), read_all(west)
        assert set(acked) <= {m.value for m in in_east}  # the acknowledged ones survived here
        assert_replicated(in_east, in_west, "east")  # ... and crossed once each, in order
        assert any("lw.origin.records" in dict(m.headers) for m in in_west)  # forwarded whole

        # the remote goes away; the backlog grows and drains when it is back
        west.stop()
        produce(east, "outage", 200)
        wait_for(lambda: any(r["state"] == "error" and r["backlog_messages"] > 0
                             for r in status(east)), "the backlog to show", 60)
        west.start()
        wait_for(lambda: drained(east), "the backlog to drain")
        assert_replicated(read_all(east), read_all(west), "east")
    finally:
        east.stop()
        west.stop()
