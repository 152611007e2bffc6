"""Log compaction with real clients against a `ledgerwire standalone` subprocess.

confluent-kafka writes many updates per key to a compacted topic; after `ledgerwire admin
topics compact`, kafka-python reads it from the beginning and gets exactly the latest value of
each key (tombstones included while delete.retention.ms lasts) at the offsets the producer was
told; a consumer group that committed before the compaction resumes after it without an
offset reset; a topic switched from delete to compact by IncrementalAlterConfigs compacts;
keyless records are refused; a broker killed (SIGKILL) inside the ledger swap restarts with
every key's latest value readable.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaConsumer

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS, UPDATES = 100, 20
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "16384",
             "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    sa = Standalone(tmp_path / "data")
    sa.start()
    try:
        yield sa
    finally:
        sa.stop()


def create_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def produce_updates(bootstrap: str, topic: str, tombstone_every: int = 10
                    ) -> dict[bytes, tuple[int, bytes | None]]:
    """UPDATES values of each of KEYS keys, interleaved; then a tombstone for every
    `tombstone_every`-th key. Returns key -> (offset, value) of its last record."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    errors: list[object] = []

    def delivered(err: object, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            latest[msg.key()] = (msg.offset(), msg.value())

    for update in range(UPDATES):
        for key in range(KEYS):
            producer.produce(topic, key=b"key-%03d" % key, value=b"value-%d-%d" % (key, update),
                             on_delivery=delivered)
        producer.flush(30)  # one flush per round: a key's updates are delivered in order
    for key in range(0, KEYS, tombstone_every):
        producer.produce(topic, key=b"key-%03d" % key, value=None, on_delivery=delivered)
    assert producer.flush(30) == 0 and errors == []
    return latest


def read_from_beginning(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """kafka-python, no group: every record from the earliest offset to the end offset."""
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=1000, auto_offset_reset="earliest",
                             request_timeout_ms=30_000)
    tp = KafkaTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]  # a loaded machine may take a while to answer
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 90
    while consumer.position(tp) < end and time.monotonic() < deadline:
        out.extend((m.offset, m.key, m.value) for m in consumer)
    consumer.close()
    return out


def compact(server: Standalone, topic: str) -> dict:  # type: ignore[type-arg]
    [result] = server.admin("topics", "compact", topic)
    assert result.get("ran"), result
    return result


def test_compacted_topic_reads_back_latest_value_per_key(server: Standalone) -> None:
    topic = "table"
    create_topic(server.bootstrap, topic, COMPACTED)
    latest = produce_updates(server.bootstrap, topic)
    # a consumer group commits half-way before the compaction
    group = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g1",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    group.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    while seen < KEYS * UPDATES // 2:
        msg = group.poll(10)
        assert msg is not None and msg.error() is None
        seen += 1
    committed = msg.offset() + 1
    group.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    group.close()

    result = compact(server, topic)
    assert result["bytes_after"] < result["bytes_before"] / 3
    assert result["keys"] == KEYS

    records = read_from_beginning(server.bootstrap, topic)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    cleaned = result["cleaned_through"]
    below = [(o, k, v) for o, k, v in records if o < cleaned]
    assert len({k for _, k, _ in below}) == len(below)  # one record per key below the point
    final = {k: (o, v) for o, k, v in records}
    assert final == latest  # the latest value (or tombstone) of every key at its offset
    assert sum(1 for _, _, v in records if v is None) == KEYS // 10  # tombstones kept

    # the group resumes at its committed offset (possibly compacted away): no reset
    resumed = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g1",
                        "enable.auto.commit": False, "auto.offset.reset": "error"})
    resumed.subscribe([topic])
    got: list[tuple[int, bytes, bytes | None]] = []
    idle = 0
    while idle < 3:
        msg = resumed.poll(2)
        if msg is None:
            idle += 1 if got else 0
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.key(), msg.value()))
    resumed.close()
    assert got == [r for r in records if r[0] >= committed]


def test_delete_topic_switched_to_compact_by_incremental_alter_configs(
        server: Standalone) -> None:
    topic = "switched"
    create_topic(server.bootstrap, topic, {"segment.bytes": "16384"})
    latest = produce_updates(server.bootstrap, topic, tombstone_every=KEYS + 1)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.cleanable.dirty.ratio", "0.01",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    result = compact(server, topic)
    records = read_from_beginning(server.bootstrap, topic)
    assert {k: (o, v) for o, k, v in records} == latest
    below = [k for o, k, _ in records if o < result["cleaned_through"]]
    assert len(below) == len(set(below)) and result["cleaned_through"] > KEYS * UPDATES // 2


def test_keyless_records_are_refused(server: Standalone) -> None:
    topic = "keyed-only"
    create_topic(server.bootstrap, topic, COMPACTED)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                         "linger.ms": 50, "retries": 0})
    results: dict[bytes, object] = {}

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        results[msg.value()] = err

    producer.produce(topic, key=b"a", value=b"keyed", on_delivery=delivered)
    producer.produce(topic, value=b"keyless", on_delivery=delivered)
    assert producer.flush(30) == 0
    assert results[b"keyless"] is not None
    assert results[b"keyless"].code() == KafkaError.INVALID_RECORD  # type: ignore[attr-defined]
    producer.produce(topic, key=b"b", value=b"alone", on_delivery=delivered)
    assert producer.flush(30) == 0 and results[b"alone"] is None
    values = [v for _, _, v in read_from_beginning(server.bootstrap, topic)]
    assert b"keyless" not in values and b"alone" in values


@pytest.mark.parametrize("crash_at", ["managed_ledger.rewrite.before_swap",
                                      "managed_ledger.rewrite.after_swap"])
def test_broker_killed_during_compaction_keeps_every_latest_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: str) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        create_topic(server.bootstrap, "table", COMPACTED)
        latest = produce_updates(server.bootstrap, "table")
        server.stop()
        monkeypatch.setenv("LEDGERWIRE_CRASH_AT", crash_at)
        server.start()
        monkeypatch.delenv("LEDGERWIRE_CRASH_AT")
        with pytest.raises(AssertionError):
            server.admin("topics", "compact", "table")  # the broker dies mid-pass
        assert server.proc is not None and server.proc.wait(30) == -9
        server.start()
        records = read_from_beginning(server.bootstrap, "table")
        assert {k: (o, v) for o, k, v in records} == latest
        compact(server, "table")  # and compaction still works after the crash
        assert {k: (o, v) for o, k, v in read_from_beginning(server.bootstrap, "table")} \
            == latest
    finally:
        server.stop()


def test_kafka_python_writes_a_compacted_topic_and_keyless_sends_fail(
        server: Standalone) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    topic = "kp-table"
    create_topic(server.bootstrap, topic, COMPACTED)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for update in range(UPDATES):
        futures = [(b"key-%03d" % key, b"kp-%d-%d" % (key, update),
                    producer.send(topic, key=b"key-%03d" % key, value=b"kp-%d-%d" % (key, update)))
                   for key in range(KEYS)]
        for key, value, future in futures:
            latest[key] = (future.get(30).offset, value)
    keyless = producer.send(topic, value=b"no key")
    with pytest.raises(InvalidRecordError):
        keyless.get(30)
    producer.close()
    result = compact(server, topic)
    records = read_from_beginning(server.bootstrap, topic)
    assert {k: (o, v) for o, k, v in records} == latest
    below = [k for o, k, _ in records if o < result["cleaned_through"]]
    assert len(below) == len(set(below)) == KEYS
