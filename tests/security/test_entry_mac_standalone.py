"""MAC digests on a real standalone (issue 26 part 4): `--ledger-password-file --entry-mac`
makes every ledger the broker creates sign its entries with an HMAC-SHA256 (metadata digest
type HMAC_SHA256); Kafka clients work unchanged, and every acknowledged record is read back
after a kill -9 and a restart (recovery of the open ledgers checks the MACs)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.support.ledger_passwords import ledger_digest_types
from tests.support.standalone import Standalone

pytestmark = pytest.mark.integration

COUNT = 100


def _consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])  # one partition, no group join
        deadline = time.monotonic() + 120  # generous: a loaded machine
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    acked: list[bytes] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked.append(msg.value() or b"")

    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert sorted(acked) == sorted(values)


def test_mac_ledgers_survive_a_kill_9(tmp_path: Path) -> None:
    password = tmp_path / "ledger.password"
    password.write_text("ledger-password\n")
    password.chmod(0o600)
    server = Standalone(tmp_path / "data", extra_args=[
        "--ledger-password-file", str(password), "--entry-mac"])
    server.start()
    try:
        topic = f"mac-{uuid.uuid4().hex[:8]}"
        before = [b"before-%d" % i for i in range(COUNT)]
        _produce(server.bootstrap, topic, before)
        server.kill()  # the partition's ledger is open: the restart recovers it
        server.start()
        after = [b"after-%d" % i for i in range(COUNT)]
        _produce(server.bootstrap, topic, after)
        assert _consume_all(server.bootstrap, topic, 2 * COUNT) == before + after
        types = ledger_digest_types(f"embedded-ro:{tmp_path / 'data' / 'metadata'}")
        assert types and set(types) == {"HMAC_SHA256"}, types
    finally:
        server.stop()


def test_entry_mac_without_a_ledger_password_is_refused(tmp_path: Path) -> None:
    server = Standalone(tmp_path / "data", extra_args=["--entry-mac"])
    with pytest.raises(RuntimeError, match="entry_mac needs storage.ledger_password_file"):
        server.start(timeout_s=60)
