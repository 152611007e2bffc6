"""A damaged offloaded object, read by real clients through a `ledgerwire standalone`.

One partition's oldest object has a flipped byte inside a data block (its checksum must catch
it), another's is deleted; their bookie copies are gone. A confluent-kafka consumer of every
partition is told, for those two partitions, CORRUPT_MESSAGE (librdkafka hands it to the
application; KAFKA_STORAGE_ERROR it would retry silently for ever, which to the user is a hang),
gets every record of the healthy partition byte-identical and no record of the damaged ranges.
A RocketMQ pull of the damaged queues is answered with an error naming the object at once, the
healthy queue is served. The broker logs a WARNING naming each object and counts the errors.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ledger_backend.managed_ledger.metadata_format import decode_name
from ledger_backend.offload.object_format import FOOTER_SIZE, decode_footer, decode_index
from ledger_backend.offload.object_store import ObjectStoreOffloader
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.offload.moto_server import moto_s3
from tests.offload.test_offload_clients import metric_values, start_server
from tests.offload.test_offload_rocketmq import connect
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext
from tests.support.kafka_records import position
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "damaged"
PER_PARTITION = 900
CORRUPT, MISSING, HEALTHY = 0, 1, 2


def objects_of(tier: Path, topic: str, partition: int) -> list[Path]:
    """The partition's objects, oldest ledger first (a key is <log>/<ledger id>-<uuid>.lwo,
    <log> the encoded managed-ledger name, "<namespace>/<topic>-<partition>")."""
    found = [p for p in tier.rglob("*.lwo")
             if decode_name(p.parent.name).endswith(f"/{topic}-{partition}")]
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[0]))


def flipped(raw: bytes, ledger_id: int) -> bytes:
    """`raw` with one byte flipped in the middle of its first data block (header, index and
    footer intact: only the block's checksum can tell)."""
    out = bytearray(raw)
    index_offset, index_length, entries, data_bytes = decode_footer(raw[-FOOTER_SIZE:])
    index = decode_index(raw[index_offset:index_offset + index_length], ledger_id,
                         entries, data_bytes, index_offset)
    block = index.blocks[0]
    out[block.offset + block.length // 2] ^= 0x5A
    return bytes(out)


def damage(tier: Path, topic: str) -> tuple[str, str]:
    """Flip a data byte of CORRUPT's oldest object, delete MISSING's; their names."""
    corrupt, missing = objects_of(tier, topic, CORRUPT)[0], objects_of(tier, topic, MISSING)[0]
    corrupt.write_bytes(flipped(corrupt.read_bytes(), int(corrupt.name.split("-", 1)[0])))
    missing.unlink()
    return corrupt.name, missing.name


def damage_in_s3(endpoint: str, topic: str) -> tuple[str, str]:
    """damage() for the objects in moto's bucket "ledgers" under the prefix "cluster-a"."""
    import obstore

    store = ObjectStoreOffloader.s3("ledgers", prefix="cluster-a", endpoint=endpoint,
                                    access_key_id="test", secret_access_key="test")._store
    keys = [item["path"] for batch in obstore.list(store) for item in batch]

    def oldest(partition: int) -> str:
        mine = [k for k in keys if k.endswith(".lwo") and decode_name(
            k.rsplit("/", 2)[-2]).endswith(f"/{topic}-{partition}")]
        return min(mine, key=lambda k: int(k.rsplit("/", 1)[1].split("-", 1)[0]))

    corrupt, missing = oldest(CORRUPT), oldest(MISSING)
    raw = bytes(obstore.get(store, corrupt).bytes())
    obstore.put(store, corrupt, flipped(raw, int(corrupt.rsplit("/", 1)[1].split("-", 1)[0])))
    obstore.delete(store, missing)
    return corrupt.rsplit("/", 1)[1], missing.rsplit("/", 1)[1]


def kafka_produce(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 1, config={"segment.bytes": "65536"})])[
        TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    errors: list[object] = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            sent[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(PER_PARTITION):
        for partition in sent:
            producer.produce(TOPIC, value=b"p%d-%05d-" % (partition, i) + bytes(200),
                             partition=partition, on_delivery=delivered)
        if i % 100 == 99:
            producer.flush(30)
    assert producer.flush(30) == 0 and errors == []
    return {p: sorted(rows) for p, rows in sent.items()}


@pytest.mark.timeout(300)
def test_kafka_consumer_is_told_corrupt_message_for_a_damaged_object(server: Standalone,
                                                                     tmp_path: Path) -> None:
    check_kafka_consumer(server, lambda: damage(tmp_path / "tier", TOPIC))


@pytest.mark.timeout(300)
def test_the_same_through_the_s3_driver(tmp_path: Path) -> None:
    with moto_s3("ledgers") as endpoint:
        sa = start_server(tmp_path, 3600, endpoint)
        try:
            check_kafka_consumer(sa, lambda: damage_in_s3(endpoint, TOPIC))
        finally:
            sa.stop()


def check_kafka_consumer(server: Standalone, damage_objects) -> None:  # type: ignore[no-untyped-def]
    """Offload, damage (names of the corrupt and the missing object), restart, consume."""
    sent = kafka_produce(server.bootstrap)
    rows = server.admin("topics", "offload", TOPIC)
    assert all(r["ledgers_offloaded"] >= 2 and r["ledgers_on_bookies"] == 1 for r in rows), rows
    corrupt, missing = damage_objects()
    server.restart()  # nothing cached; the damaged partitions still open and take appends
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    appended: list[object] = []
    for partition in (CORRUPT, MISSING):
        producer.produce(TOPIC, value=b"after", partition=partition,
                         on_delivery=lambda err, msg: appended.append(err or msg.offset()))
    assert producer.flush(60) == 0
    assert appended == [PER_PARTITION, PER_PARTITION], appended

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.error.backoff.ms": 200})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in (CORRUPT, MISSING, HEALTHY)])
    got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    errors: dict[int, set[int]] = {CORRUPT: set(), MISSING: set()}
    others: list[KafkaError] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and (
                len(got[HEALTHY]) < PER_PARTITION or not all(errors.values())):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                failed = msg.partition()
                if failed is not None and failed in errors:
                    errors[failed].add(error.code())
                else:
                    others.append(error)
                continue
            partition, offset = position(msg)
            got[partition].append((offset, msg.value() or b""))
    finally:
        consumer.close()
    assert got[HEALTHY] == sent[HEALTHY]
    # INVALID_MSG is librdkafka's name for the wire's CORRUPT_MESSAGE (2)
    assert errors == {CORRUPT: {KafkaError.INVALID_MSG}, MISSING: {KafkaError.INVALID_MSG}}
    assert got[CORRUPT] == got[MISSING] == [], "a record of a damaged ledger was served"
    assert others == []

    log = server.log()
    assert corrupt in log and "checksum" in log
    assert missing in log
    assert metric_values(server)["ledgerwire_offload_read_errors_total"] >= 2


RQ_TOPIC = "damaged-rq"
RQ_MESSAGES = 300


@pytest.mark.timeout(300)
async def test_rocketmq_pull_of_a_damaged_object_is_answered_an_error(server: Standalone,
                                                                      tmp_path: Path) -> None:
    sa = server
    admin = AdminClient({"bootstrap.servers": sa.bootstrap})  # small ledgers: several per queue
    admin.create_topics([NewTopic(RQ_TOPIC, 3, 1, config={"segment.bytes": "65536"})])[
        RQ_TOPIC].result(30)
    broker = f"127.0.0.1:{sa.rocketmq_broker_port}"
    client = await connect(broker)
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for i in range(RQ_MESSAGES):
        for queue in sent:
            body = b"rq%d-%04d-" % (queue, i) + bytes(600)
            r = await client.call(RC.SEND_MESSAGE_V2,
                                  send_ext(RQ_TOPIC, {"TAGS": "t"}, queue_id=queue), body)
            assert r.code == ResponseCode.SUCCESS, r.remark
            sent[queue].append(body)
    await client.aclose()
    rows = sa.admin("topics", "offload", RQ_TOPIC)
    assert all(r["ledgers_offloaded"] >= 1 and r["ledgers_on_bookies"] == 1
               for r in rows if r["partition"] in sent), rows
    corrupt, missing = damage(tmp_path / "tier", RQ_TOPIC)
    sa.restart()

    client = await connect(broker)
    try:
        for queue, name in ((CORRUPT, corrupt), (MISSING, missing)):
            r = await client.call(RC.PULL_MESSAGE, pull_ext(RQ_TOPIC, queue, 0), wait_s=30)
            assert r.code == ResponseCode.SYSTEM_ERROR, (queue, r.code, r.remark)
            assert name in (r.remark or ""), r.remark
            assert not r.body
        bodies: list[bytes] = []
        offset = 0
        while len(bodies) < RQ_MESSAGES:
            r = await client.call(RC.PULL_MESSAGE, pull_ext(RQ_TOPIC, HEALTHY, offset), wait_s=30)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark, offset)
            bodies.extend(m.body for m in decode_stored_messages(r.body))
            offset = int(r.ext_fields["nextBeginOffset"])
        assert bodies == sent[HEALTHY]
    finally:
        await client.aclose()
    log = sa.log()
    assert corrupt in log and missing in log
    assert metric_values(sa)["ledgerwire_offload_read_errors_total"] >= 2
