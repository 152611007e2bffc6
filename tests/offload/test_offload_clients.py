"""Tiered storage with a real client against a `ledgerwire standalone` subprocess.

confluent-kafka writes a topic of small ledgers; `ledgerwire admin topics offload` moves its
closed ledgers to a directory ([offload] driver = "filesystem", no deletion lag, so the bookie
copies go at once); confluent-kafka then reads every record byte-identical (keys, values,
headers, timestamps, offsets), again after a restart; the same through the S3 driver against
moto's real S3 server. A corrupted object is reported in the
broker's log by name and never served.
"""

from __future__ import annotations

import random
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.offload.moto_server import moto_s3
from tests.support.kafka_records import header_list, position
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "history"
RECORDS = 3000

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None, int]


def start_server(tmp_path: Path, interval_s: float, s3_endpoint: str | None = None
                 ) -> Standalone:
    config = tmp_path / "ledgerwire.toml"
    driver = (f'driver = "s3"\nbucket = "ledgers"\nprefix = "cluster-a"\n'
              f'endpoint = "{s3_endpoint}"\naccess_key_id = "test"\n'
              'secret_access_key = "test"\n' if s3_endpoint else
              f'driver = "filesystem"\ndirectory = "{tmp_path / "tier"}"\n')
    config.write_text(
        f"[offload]\n{driver}deletion_lag_s = 0\ninterval_s = {interval_s}\n"
    )
    config.chmod(0o600)
    sa = Standalone(tmp_path / "data", extra_args=["--config", str(config)])
    sa.start()
    return sa


def produce(bootstrap: str) -> list[Record]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "65536"})])[
        TOPIC].result(30)
    rng = random.Random(18)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": "lz4"})
    sent: list[Record] = []
    errors: list[object] = []

    def delivered(record: tuple[bytes, bytes, list[tuple[str, bytes]] | None, int]):  # type: ignore[no-untyped-def]
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                sent.append((msg.offset(), *record))
        return callback

    for i in range(RECORDS):
        key, value = b"k%d" % (i % 97), rng.randbytes(rng.randrange(1, 300))
        headers = [("n", b"%d" % i)] if i % 5 == 0 else None
        timestamp = 1_700_000_000_000 + i
        wire: list[tuple[str, str | bytes | None]] | None = (
            None if headers is None else list(headers))
        producer.produce(TOPIC, key=key, value=value, headers=wire, timestamp=timestamp,
                         on_delivery=delivered((key, value, headers, timestamp)))
        if i % 500 == 499:
            producer.flush(30)
    assert producer.flush(30) == 0 and errors == []
    return sorted(sent, key=lambda r: r[0])


def consume_all(bootstrap: str, count: int, timeout_s: float = 60.0) -> list[Record]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((position(msg)[1], msg.key(), msg.value(), header_list(msg),
                        msg.timestamp()[1]))
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(300)
def test_offloaded_history_reads_byte_identical_across_a_restart(server: Standalone,
                                                                  tmp_path: Path) -> None:
    sent = produce(server.bootstrap)
    rows = server.admin("topics", "offload", TOPIC)
    assert len(rows) == 1 and rows[0]["ledgers_offloaded"] >= 3, rows
    assert rows[0]["ledgers_on_bookies"] == 1, rows  # the open ledger only: copies deleted
    objects = sorted((tmp_path / "tier").rglob("*.lwo"))
    assert len(objects) == rows[0]["ledgers_offloaded"]
    status = server.admin("topics", "offload-status", TOPIC)
    assert status[0]["ledgers_offloaded"] == rows[0]["ledgers_offloaded"]

    assert consume_all(server.bootstrap, len(sent)) == sent
    server.restart()
    assert consume_all(server.bootstrap, len(sent)) == sent

    metrics = metric_values(server)
    assert metrics['ledgerwire_offload_ledgers{partition="0",topic="history"}'] == len(objects)
    assert metrics["ledgerwire_offload_read_errors_total"] == 0
    assert metrics["ledgerwire_offload_store_reads_total"] > len(objects)  # index + blocks
    assert metrics["ledgerwire_offload_store_read_seconds_total"] > 0

    # a corrupted object: a WARNING naming it, and not one record of that ledger served
    victim = objects[0]
    raw = bytearray(victim.read_bytes())
    raw[200] ^= 0x01
    victim.write_bytes(bytes(raw))
    server.restart()  # nothing cached
    got = consume_all(server.bootstrap, 1, timeout_s=10)
    assert got == []
    assert victim.name in server.log() and "checksum" in server.log()
    # (the partition still opens: tests/offload/test_offload_damaged_objects.py)
    after = metric_values(server)
    assert after["ledgerwire_offload_read_errors_total"] >= 1
    assert after["ledgerwire_offload_store_reads_total"] >= 1


def metric_values(server: Standalone) -> dict[str, float]:
    url = f"http://127.0.0.1:{server.admin_port}/metrics"
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("ledgerwire_offload")}


@pytest.mark.timeout(300)
def test_the_namespace_threshold_offloads_in_the_background(tmp_path: Path) -> None:
    sa = start_server(tmp_path, 1)
    try:
        sa.admin("policies", "set", "public/default", "offload_threshold_mb=0")
        # a topic that opts out the Kafka way (KIP-405's config) stays on bookies
        admin = AdminClient({"bootstrap.servers": sa.bootstrap})
        admin.create_topics([NewTopic("pinned", 1, 1, config={
            "segment.bytes": "65536", "remote.storage.enable": "false"})])["pinned"].result(30)
        pinned = Producer({"bootstrap.servers": sa.bootstrap, "acks": "all"})
        for i in range(600):  # flushed in small batches: several ledgers roll
            pinned.produce("pinned", value=b"%0300d" % i)
            if i % 50 == 49:
                pinned.flush(30)
        assert pinned.flush(30) == 0
        sent = produce(sa.bootstrap)
        deadline = time.monotonic() + 60
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            rows = sa.admin("topics", "offload-status", TOPIC)
            if rows and rows[0]["ledgers_on_bookies"] == 1 and rows[0]["ledgers_offloaded"]:
                break
            time.sleep(0.5)
        assert rows and rows[0]["ledgers_on_bookies"] == 1, rows  # all but the open one
        assert consume_all(sa.bootstrap, len(sent)) == sent
        kept = sa.admin("topics", "offload-status", "pinned")
        assert kept[0]["ledgers_offloaded"] == 0 and kept[0]["ledgers_on_bookies"] > 1, kept
    finally:
        sa.stop()


@pytest.mark.timeout(300)
def test_offloaded_to_s3_reads_byte_identical(tmp_path: Path) -> None:
    with moto_s3("ledgers") as endpoint:
        sa = start_server(tmp_path, 3600, endpoint)
        try:
            sent = produce(sa.bootstrap)
            rows = sa.admin("topics", "offload", TOPIC)
            assert rows[0]["ledgers_offloaded"] >= 3 and rows[0]["ledgers_on_bookies"] == 1, rows
            sa.restart()
            assert consume_all(sa.bootstrap, len(sent)) == sent
        finally:
            sa.stop()
