"""A produce whose compressed payload is damaged (its CRC still matching: a buggy client) is
answered CORRUPT_MESSAGE for that partition alone, with no traceback in the broker's log; the
other partition of the same request is stored. Legacy message sets are decompressed on
produce (converted to v2 batches), so their snappy and magic-0 lz4 wrappers reach the codecs."""

from __future__ import annotations

import logging
import struct
import zlib

import pytest

from protocols.kafka import compression as codecs
from protocols.kafka.errors import ErrorCode
from tests.kafka_server.conftest import KafkaStack
from tests.kafka_server.test_kafka_handlers_wire import PRODUCE, create_topic


def legacy_wrapper(magic: int, codec: int, value: bytes) -> bytes:
    """One legacy log entry whose value is a compressed inner message set (none here: the
    value is whatever bytes the test gives)."""
    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", 1_000) if magic else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def plain_entry() -> bytes:
    body = struct.pack(">bbq", 1, 0, 1_000) + struct.pack(">i", -1) + struct.pack(">i", 2) + b"ok"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


SNAPPY_GARBAGE = b"\xff\xff\xff\xff\x0f garbage"  # claims 4 GB, holds 8 bytes
LZ4_GARBAGE = bytes.fromhex("04224d18" "60" "40" "82") + (4).to_bytes(4, "little") \
    + b"\xf0\xff\xff\xff" + bytes(4)  # one compressed block that decodes to nothing sane


@pytest.mark.parametrize(("magic", "codec", "value"), [
    (1, codecs.SNAPPY, SNAPPY_GARBAGE),
    (0, codecs.SNAPPY, codecs.compress(codecs.SNAPPY, b"x" * 64)[:16] + b"\0\0\0\x0d"
     + SNAPPY_GARBAGE),
    (0, codecs.LZ4, LZ4_GARBAGE),
], ids=["snappy-raw", "snappy-xerial", "lz4-magic0"])
async def test_damaged_compressed_legacy_set_is_corrupt_message(
        stack: KafkaStack, caplog: pytest.LogCaptureFixture, magic: int, codec: int,
        value: bytes) -> None:
    async with await stack.client() as client:
        await create_topic(client, "damaged", partitions=2)
        with caplog.at_level(logging.WARNING):
            answer = await client.request(PRODUCE, 2, {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": "damaged", "partition_data": [
                    {"index": 0, "records": legacy_wrapper(magic, codec, value)},
                    {"index": 1, "records": plain_entry()}]}]})
    damaged, fine = answer["responses"][0]["partition_responses"]
    assert damaged["error_code"] == ErrorCode.CORRUPT_MESSAGE, damaged
    assert fine["error_code"] == 0 and fine["base_offset"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], \
        [r.getMessage() for r in caplog.records]
