"""Produce of magic v0/v1 message sets: one atomic append per partition, and old clients.

A failed ledger append of a converted legacy set must leave nothing of the request in the log,
so the client's retry stores exactly one copy.  The failure is injected into the ledger write
for the entry that holds the set's *last* message: were the set split into several batches, the
batches before it would be stored and the retry would duplicate them.
"""

from __future__ import annotations

import struct
import time
import warnings
import zlib
from typing import Any

import pytest
import trio

from ledger_backend.client.errors import BKTimeoutError
from ledger_backend.client.memory import MemoryWriteHandle
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers import produce as produce_handler
from protocols.kafka.record_batch import iter_batches
from tests.kafka_server.conftest import KafkaStack
from tests.kafka_server.test_kafka_handlers_wire import (
    FETCH,
    create_topic,
    fetch_body,
    fetched_records,
    produce,
)

FAIL_MARKER = b"<fail-this-append>"
CLIENT_TIMEOUT_S = 30.0


def v1_message(offset: int, key: bytes, value: bytes, timestamp: int) -> bytes:
    body = struct.pack(">bbq", 1, 0, timestamp)
    body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def legacy_set(count: int) -> tuple[bytes, list[tuple[bytes, bytes, int]]]:
    """An uncompressed v1 set whose last message carries the failure marker."""
    sent = [(b"k%d" % i, b"v%d" % i + (FAIL_MARKER if i == count - 1 else b""), 5_000 + i)
            for i in range(count)]
    return b"".join(v1_message(i, k, v, ts) for i, (k, v, ts) in enumerate(sent)), sent


async def fetch_all(stack: KafkaStack, topic: str) -> list[tuple[int, bytes | None,
                                                                 bytes | None, int]]:
    async with await stack.client() as client:
        answer = await client.request(FETCH, 11, fetch_body(topic, 0))
    part = answer["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    return [(r.offset, r.key, r.value, r.timestamp) for r in fetched_records(part)]


async def test_failed_legacy_append_stores_nothing_and_retry_stores_one_copy(
    stack: KafkaStack, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_append = MemoryWriteHandle.append
    appends_with_marker: list[int] = []
    ledger_appends: list[bytes] = []

    async def failing_once(self: MemoryWriteHandle, data: bytes) -> int:
        if FAIL_MARKER in data:
            appends_with_marker.append(len(data))
            if len(appends_with_marker) == 1:
                raise BKTimeoutError("injected: the bookies did not acknowledge in time")
        ledger_appends.append(data)
        return await real_append(self, data)

    monkeypatch.setattr(MemoryWriteHandle, "append", failing_once)
    records, sent = legacy_set(5)
    async with await stack.client() as client:
        await create_topic(client, "legacy-atomic")
        ledger_appends.clear()
        failed = await produce(client, "legacy-atomic", 0, records, version=2)
        assert failed["error_code"] != 0, failed
        assert ledger_appends == [], "part of the failed request reached the ledger"
        assert await fetch_all(stack, "legacy-atomic") == []

        for _attempt in range(5):  # the client's retry; the failed log is replaced meanwhile
            answer = await produce(client, "legacy-atomic", 0, records, version=2)
            if answer["error_code"] == 0:
                break
            assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER, answer
            await trio.sleep(0.05)
        assert answer["error_code"] == 0 and answer["base_offset"] == 0, answer
    stored = [e for e in ledger_appends if FAIL_MARKER in e]
    assert len(stored) == 1 and len(list(iter_batches(stored[0]))) == 1
    assert await fetch_all(stack, "legacy-atomic") == [
        (i, k, v, ts) for i, (k, v, ts) in enumerate(sent)]


async def test_large_legacy_set_is_converted_off_the_trio_thread(
    stack: KafkaStack, monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[bool] = []
    real_convert = produce_handler.convert_legacy_to_batch

    def recording_convert(data: bytes | memoryview) -> bytes:
        try:
            trio.lowlevel.current_task()
            threads.append(False)
        except RuntimeError:
            threads.append(True)
        return real_convert(data)

    monkeypatch.setattr(produce_handler, "convert_legacy_to_batch", recording_convert)
    sent = [(b"k%d" % i, b"value-%d-" % i + b"y" * 60, 9_000 + i) for i in range(1500)]
    records = b"".join(v1_message(i, k, v, ts) for i, (k, v, ts) in enumerate(sent))
    assert len(records) > produce_handler.LEGACY_CONVERT_IN_THREAD_BYTES
    small, _ = legacy_set(3)
    async with await stack.client() as client:
        await create_topic(client, "legacy-big")
        assert (await produce(client, "legacy-big", 0, small, version=2))["error_code"] == 0
        answer = await produce(client, "legacy-big", 0, records, version=2)
    assert answer["error_code"] == 0 and answer["base_offset"] == 3, answer
    assert threads == [False, True]
    got = await fetch_all(stack, "legacy-big")
    assert got[3:] == [(3 + i, k, v, ts) for i, (k, v, ts) in enumerate(sent)]


# --- kafka-python speaking the 0.10 protocol (Produce v2, magic v1) ------------------------------


def old_protocol_produce(bootstrap: str, topic: str, codec: str | None,
                         sent: list[tuple[bytes, bytes, int]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 10),
                             compression_type=codec, acks="all", linger_ms=20,
                             request_timeout_ms=20000)
    try:
        futures = [producer.send(topic, key=k, value=v, timestamp_ms=ts, partition=0)
                   for k, v, ts in sent]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        for future in futures:
            future.get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close(timeout=10)


def consume(bootstrap: str, topic: str, count: int) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.key, r.value, r.timestamp) for r in records)
        return got
    finally:
        consumer.close()


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:.* is deprecated. Use files:DeprecationWarning")
@pytest.mark.parametrize("codec", [None, "gzip"])
async def test_kafka_python_0_10_producer_round_trip(
    stack: KafkaStack, codec: str | None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    converted: list[int] = []
    real_convert = produce_handler.convert_legacy_to_batch

    def counting_convert(data: bytes | memoryview) -> bytes:
        converted.append(len(data))
        return real_convert(data)

    monkeypatch.setattr(produce_handler, "convert_legacy_to_batch", counting_convert)
    topic = f"legacy-kp-{codec or 'none'}"
    await stack.topics.create_topic(topic, 1)
    sent = [(b"key-%d" % i, b"value-%d-" % i + b"x" * (i % 37), 1_700_000_000_000 + i)
            for i in range(300)]
    with trio.fail_after(CLIENT_TIMEOUT_S * 2):
        await trio.to_thread.run_sync(
            lambda: old_protocol_produce(stack.bootstrap, topic, codec, sent))
        got = await trio.to_thread.run_sync(lambda: consume(stack.bootstrap, topic, len(sent)))
    assert converted, "the 0.10 producer must have sent magic v1 message sets"
    assert got == [(i, k, v, ts) for i, (k, v, ts) in enumerate(sent)]
