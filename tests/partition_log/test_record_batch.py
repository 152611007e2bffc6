"""RecordBatch v2 header checks, offset patching, LogAppendTime, legacy conversion, codecs."""

from __future__ import annotations

import struct
import time
import warnings
import zlib

import lz4.frame
import pytest

with warnings.catch_warnings():
    # kafka-python 3 calls importlib.resources.read_text at import (a DeprecationWarning).
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocols.kafka import compression as codecs
from protocols.kafka import legacy_message_set as legacy
from protocols.kafka import record_batch as rb
from protocols.kafka.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)


def kafka_python_batch(codec: int, n: int = 10, **kw: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False,
        producer_id=kw.get("producer_id", -1), producer_epoch=kw.get("producer_epoch", -1),
        base_sequence=kw.get("base_sequence", -1), batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(i, timestamp=1_000 + i, key=b"k%d" % i, value=b"v" * (i * 50),
                       headers=[("h", b"x%d" % i)])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_decode_kafka_python_batches_every_codec(codec: int) -> None:
    data = kafka_python_batch(codec, producer_id=7, producer_epoch=1, base_sequence=3)
    [(header, view)] = list(rb.iter_batches(data))
    rb.validate_batch(header, view)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 3)
    assert header.last_sequence == 12 and header.records_count == 10
    records = rb.decode_records(data)
    assert [r.offset for r in records] == list(range(10))
    assert [r.value for r in records] == [b"v" * (i * 50) for i in range(10)]
    assert records[4].key == b"k4" and records[4].timestamp == 1004
    assert records[4].headers == [("h", b"x4")]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_build_batch_is_readable_by_kafka_python(codec: int) -> None:
    records = [rb.Record(0, 5_000 + i, None if i % 2 else b"key", b"value-%d" % i, [("a", None)])
               for i in range(20)]
    data = rb.build_batch(records, compression=codec, base_offset=100, producer_id=9,
                          producer_epoch=2, base_sequence=40)
    theirs = DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc()
    decoded = list(theirs)
    assert [r.offset for r in decoded] == list(range(100, 120))
    assert [r.value for r in decoded] == [b"value-%d" % i for i in range(20)]
    assert decoded[1].key is None and decoded[0].key == b"key"
    assert [r.timestamp for r in decoded] == [5_000 + i for i in range(20)]
    assert rb.decode_records(data) == [
        rb.Record(100 + i, 5_000 + i, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


def test_header_layout_is_61_bytes() -> None:
    assert rb.HEADER_SIZE == 61
    data = rb.build_batch([(b"k", b"v")], timestamp_ms=1)
    header = rb.parse_header(data)
    assert header.size == len(data) and header.magic == 2 and header.crc == rb.compute_crc(data)


def test_validate_rejects_bad_crc_size_magic_and_count() -> None:
    data = bytearray(rb.build_batch([(b"k", b"v"), (None, b"w")], timestamp_ms=1))
    header = rb.parse_header(data)
    rb.validate_batch(header, data)
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="CRC"):
        rb.validate_batch(rb.parse_header(corrupt), corrupt)
    with pytest.raises(CorruptMessageError):
        list(rb.iter_batches(data[:-3]))  # batchLength claims more than there is
    with pytest.raises(CorruptMessageError):
        list(rb.iter_batches(data[:40]))  # truncated header
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(CorruptMessageError, match="magic"):
        list(rb.iter_batches(bad_magic))
    # lastOffsetDelta inconsistent with the count (fields inside the CRC: fix the CRC too)
    inconsistent = bytearray(data)
    struct.pack_into(">i", inconsistent, 23, 5)
    struct.pack_into(">I", inconsistent, 17, rb.compute_crc(inconsistent))
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        rb.validate_batch(rb.parse_header(inconsistent), inconsistent)
    zero = bytearray(data)
    struct.pack_into(">i", zero, 57, 0)
    struct.pack_into(">I", zero, 17, rb.compute_crc(zero))
    with pytest.raises(InvalidRecordError, match="count"):
        rb.validate_batch(rb.parse_header(zero), zero)
    codec7 = bytearray(data)
    struct.pack_into(">h", codec7, 21, 7)
    struct.pack_into(">I", codec7, 17, rb.compute_crc(codec7))
    with pytest.raises(UnsupportedCompressionTypeError):
        rb.validate_batch(rb.parse_header(codec7), codec7)


def test_validate_timestamps_and_client_rules() -> None:
    now = int(time.time() * 1000)
    data = rb.build_batch([(None, b"v")], timestamp_ms=now - 10_000)
    h = rb.parse_header(data)
    rb.validate_batch(h, data, now_ms=now, max_timestamp_diff_ms=60_000)
    with pytest.raises(InvalidTimestampError):
        rb.validate_batch(h, data, now_ms=now, max_timestamp_diff_ms=1_000)
    producer_lat = rb.build_batch([(None, b"v")], log_append_time_ms=now)
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        rb.validate_batch(rb.parse_header(producer_lat), producer_lat)
    control = rb.build_control_batch(rb.CONTROL_COMMIT, producer_id=1, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control"):
        rb.validate_batch(rb.parse_header(control), control)
    rb.validate_batch(rb.parse_header(control), control, from_client=False)
    no_seq = rb.build_batch([(None, b"v")], producer_id=3, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="sequence"):
        rb.validate_batch(rb.parse_header(no_seq), no_seq)


def test_patch_base_offset_keeps_crc_valid() -> None:
    data = bytearray(kafka_python_batch(codecs.ZSTD))
    crc_before = rb.parse_header(data).crc
    rb.patch_base_offset(data, 123_456_789_012)
    header = rb.parse_header(data)
    assert header.base_offset == 123_456_789_012 and header.crc == crc_before
    rb.validate_batch(header, data)
    assert rb.decode_records(data)[3].offset == 123_456_789_015
    assert DefaultRecordBatch(data).validate_crc()


def test_set_log_append_time_sets_max_timestamp_and_crc() -> None:
    data = bytearray(kafka_python_batch(codecs.NONE, n=3))
    rb.set_log_append_time(data, 99_999)
    header = rb.parse_header(data)
    assert header.timestamp_type == 1 and header.max_timestamp == 99_999
    assert header.base_timestamp == 1_000  # in-place: Kafka leaves the base timestamp alone
    assert header.crc == rb.compute_crc(data)
    rb.validate_batch(header, data, from_client=False)
    assert [r.timestamp for r in rb.decode_records(data)] == [99_999] * 3
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and [r.timestamp for r in theirs] == [99_999] * 3


def test_control_batch_is_readable() -> None:
    data = rb.build_control_batch(rb.CONTROL_ABORT, producer_id=5, producer_epoch=3,
                                  coordinator_epoch=7, base_offset=40)
    header = rb.parse_header(data)
    assert header.is_control and header.is_transactional
    [record] = rb.decode_records(data)
    assert record.offset == 40
    assert rb.parse_control_record(record) == rb.ControlRecord(0, rb.CONTROL_ABORT, 7)


def legacy_message(magic: int, attributes: int, key: bytes | None, value: bytes | None,
                   timestamp: int = -1, offset: int = 0) -> bytes:
    """One legacy log entry built from the documented layout."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        body += struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def test_convert_hand_built_v0_and_v1_message_sets() -> None:
    v0 = legacy_message(0, 0, b"a", b"1") + legacy_message(0, 0, None, b"2", offset=1)
    [batch] = legacy.convert_legacy_message_set(v0)
    records = rb.decode_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, -1, b"a", b"1"), (1, -1, None, b"2")]
    inner = legacy_message(1, 0, None, b"x", 10) + legacy_message(1, 0, None, b"y", 11, 1)
    wrapper = legacy_message(1, codecs.GZIP | 0x08, None, codecs.compress(codecs.GZIP, inner), 77)
    [batch] = legacy.convert_legacy_message_set(wrapper)
    header = rb.parse_header(batch)
    assert header.compression == codecs.GZIP and header.records_count == 2
    # a LogAppendTime wrapper's timestamp applies to its inner messages
    assert [(r.timestamp, r.value) for r in rb.decode_records(batch)] == [(77, b"x"), (77, b"y")]


def test_convert_rejects_bad_legacy_crc_and_nested_compression() -> None:
    good = bytearray(legacy_message(0, 0, None, b"payload"))
    good[-1] ^= 1
    with pytest.raises(CorruptMessageError, match="CRC"):
        legacy.convert_legacy_message_set(good)
    nested = legacy_message(0, codecs.GZIP, None, b"xx")
    wrapper = legacy_message(0, codecs.GZIP, None, codecs.compress(codecs.GZIP, nested))
    with pytest.raises(InvalidRecordError):
        legacy.convert_legacy_message_set(wrapper)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2])
def test_convert_kafka_python_legacy_builder(magic: int, codec: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(5):
        builder.append(i, timestamp=2_000 + i if magic else None, key=None, value=b"val%d" % i)
    [batch] = legacy.convert_legacy_message_set(bytes(builder.build()))
    records = rb.decode_records(batch)
    assert [r.value for r in records] == [b"val%d" % i for i in range(5)]
    expected_ts = [2_000 + i for i in range(5)] if magic else [-1] * 5
    assert [r.timestamp for r in records] == expected_ts
    assert rb.parse_header(batch).compression == codec


def test_convert_v0_lz4_with_the_old_broken_frame_checksum() -> None:
    inner = legacy_message(0, 0, None, b"old-lz4") * 3
    frame = bytearray(lz4.frame.compress(inner, block_linked=False, store_size=False))
    frame[6] ^= 0x5A  # a wrong header checksum, as Kafka < 0.10 wrote for magic v0
    [batch] = legacy.convert_legacy_message_set(legacy_message(0, codecs.LZ4, None, bytes(frame)))
    assert [r.value for r in rb.decode_records(batch)] == [b"old-lz4"] * 3


def test_decompression_bomb_is_refused() -> None:
    big = rb.build_batch([(None, b"\0" * (4 << 20))], compression=codecs.GZIP, timestamp_ms=1)
    with pytest.raises(CorruptMessageError):
        rb.decode_records(big, max_uncompressed_bytes=1 << 20)
