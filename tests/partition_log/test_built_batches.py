"""Batches the broker encoded itself take PartitionLog.append_built (kafka/built_batch.py):
stored exactly as the checked path stores the same bytes, still held to the topic's limits,
and unreachable with a client's bytes."""

from __future__ import annotations

import time

import pytest

from protocols.kafka import record_batch as rb
from protocols.kafka.built_batch import BuiltBatch, built_batch
from protocols.kafka.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
)
from protocols.rocketmq.message_encoding import MessageMeta, message_batch


def one_message(ts: int, key: bytes | None = b"k", size: int = 10) -> BuiltBatch:
    return built_batch([rb.Record(0, ts, key, b"v" * size, [("h", b"x")])])


@pytest.mark.parametrize("configs", [{}, {"message.timestamp.type": "LogAppendTime"}])
async def test_a_built_batch_is_stored_as_the_same_bytes_appended_by_a_client(
        make_broker, configs: dict[str, str]) -> None:
    broker = await make_broker()
    now = int(time.time() * 1000)
    batches = [one_message(now), message_batch(b"body", {"KEYS": "a", "TAGS": "t"},
                                               MessageMeta(born_host=("10.0.0.1", 9)), now)]
    for name in ("built", "client"):
        await broker.topics.create_topic(name, 1, configs)
    built = await broker.topics.partition("built", 0)
    client = await broker.topics.partition("client", 0)
    for batch in batches * 2:
        by_broker = await built.append_built(batch)
        by_client = await client.append(batch.data)
        assert by_broker.base_offset == by_client.base_offset
        assert (by_broker.log_append_time_ms == -1) == (by_client.log_append_time_ms == -1)
    stored_built = await built.read(0, 1 << 20)
    stored_client = await client.read(0, 1 << 20)
    assert len(stored_built) == 4
    for a, b in zip(stored_built, stored_client, strict=True):
        if configs:  # each log stamps its own append time: compare all but that and the CRC
            ha, hb = rb.parse_header(a), rb.parse_header(b)
            assert ha.timestamp_type == hb.timestamp_type == 1
            rb.validate_batch(ha, a, from_client=False)
            assert a[:17] == b[:17] and a[21:35] == b[21:35] and a[43:] == b[43:]
        else:
            assert a == b
    assert built.high_watermark == client.high_watermark == 4


async def test_client_bytes_cannot_take_the_trusted_path(make_broker) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    good = one_message(int(time.time() * 1000)).data
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    for client_bytes in (bytes(corrupt), memoryview(corrupt), bytearray(corrupt)):
        with pytest.raises(TypeError):
            await plog.append_built(client_bytes)  # type: ignore[arg-type]
        with pytest.raises(CorruptMessageError):
            await plog.append(client_bytes)  # type: ignore[arg-type]
    assert plog.high_watermark == 0


async def test_a_built_batch_still_meets_the_topics_limits(make_broker) -> None:
    broker = await make_broker(max_message_bytes=2_000)
    await broker.topics.create_topic("limits", 1, {"message.timestamp.difference.max.ms": "60000"})
    await broker.topics.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    plog = await broker.topics.partition("limits", 0)
    now = int(time.time() * 1000)
    with pytest.raises(MessageTooLargeError):
        await plog.append_built(one_message(now, size=5_000))
    with pytest.raises(InvalidTimestampError):
        await plog.append_built(one_message(now - 3_600_000))
    assert (await plog.append_built(one_message(now))).base_offset == 0
    compacted = await broker.topics.partition("compacted", 0)
    with pytest.raises(InvalidRecordError):
        await compacted.append_built(one_message(now, key=None))
    assert (await compacted.append_built(one_message(now))).base_offset == 0
