"""Kafka RecordBatch v2: the header on the hot path, and records for tools and tests.

The produce and fetch paths only touch the 61-byte batch header (`iter_batches`,
`validate_batch`, `patch_base_offset`, `set_log_append_time`): a batch is stored and served as the
producer's bytes, with its base offset patched in place (that field is outside the CRC).  Records
are decoded (`decode_records`) and encoded (`build_batch`) only by tests, tools, the Spark bridge
and the RocketMQ path, for every codec.  Layout and CRC coverage: shared/reference/NOTES.md.

Legacy (magic v0/v1) message sets from old Produce versions are turned into one v2 batch each by
`convert_legacy_to_batch` in legacy_message_set.py, which builds on this module.

This module is sans-IO: it never touches sockets, files, Trio or the ledger, and it never decodes
records on the produce/fetch path.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import crc32c

from protocols.kafka import compression as codecs
from protocols.kafka.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
CRC_START = 21  # the CRC covers attributes .. end
_MAX_TS = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_SEQUENCE = 0x7FFFFFFF

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 record batch (field names as in DefaultRecordBatch)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & ATTR_LOG_APPEND_TIME else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def size(self) -> int:
        """Bytes of the whole batch, including baseOffset and batchLength."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from int32 max to 0 (Kafka's rule)."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (MAX_SEQUENCE + 1)


def parse_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at `pos` (no validation beyond length)."""
    if len(data) - pos < HEADER_SIZE:
        raise CorruptMessageError(f"record batch header needs {HEADER_SIZE} bytes")
    return BatchHeader(*HEADER.unpack_from(data, pos))


def records_magic(records: bytes | bytearray | memoryview) -> int:
    """The magic byte of the first batch/message in `records` (2 for v2, 0/1 for legacy)."""
    if len(records) < 17:
        raise CorruptMessageError("records are too short to hold a batch")
    return records[16]


def iter_batches(
    records: bytes | bytearray | memoryview,
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Split v2 `records` into (header, whole-batch view); CorruptMessageError on bad framing.

    Only the framing is checked here (length and magic); call `validate_batch` for the rest.
    """
    view = memoryview(records)
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated record batch at byte {pos}")
        header = BatchHeader(*HEADER.unpack_from(view, pos))
        if header.magic != 2:
            raise CorruptMessageError(
                f"record batch magic {header.magic} at byte {pos}, expected 2"
            )
        size = header.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            raise CorruptMessageError(
                f"record batch at byte {pos} claims {size} bytes, {end - pos} available"
            )
        yield header, view[pos : pos + size]
        pos += size


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return crc32c.crc32c(memoryview(batch)[CRC_START:])


def validate_batch(
    header: BatchHeader,
    batch_bytes: bytes | bytearray | memoryview,
    *,
    now_ms: int | None = None,
    max_timestamp_diff_ms: int | None = None,
    from_client: bool = True,
) -> None:
    """Check one v2 batch as Kafka's broker does before appending it, without decoding records.

    Size, magic, CRC-32C, record count >= 1 and lastOffsetDelta == count - 1, a known codec, no
    producer-set LogAppendTime, maxTimestamp >= baseTimestamp, and (when `max_timestamp_diff_ms`
    is given, CreateTime only) both header timestamps within that distance of `now_ms`.  Clients
    may not write control batches, and an idempotent batch needs a sequence >= 0.
    """
    if header.magic != 2:
        raise CorruptMessageError(f"record batch magic {header.magic}, expected 2")
    if header.size != len(batch_bytes) or header.size < HEADER_SIZE:
        raise CorruptMessageError(
            f"record batch length {header.size} does not match its {len(batch_bytes)} bytes"
        )
    if compute_crc(batch_bytes) != header.crc:
        raise CorruptMessageError("record batch CRC-32C mismatch")
    if header.records_count <= 0:
        raise InvalidRecordError(f"invalid record count {header.records_count}")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"inconsistent batch offset range: lastOffsetDelta {header.last_offset_delta} "
            f"for {header.records_count} records"
        )
    if header.compression not in codecs.CODEC_NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {header.compression}")
    if from_client:
        if header.is_control:
            raise InvalidRecordError("clients are not allowed to write control records")
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidRecordError(f"invalid sequence number {header.base_sequence}")
        if header.timestamp_type == 1:
            raise InvalidTimestampError("producers must not set the LogAppendTime timestamp type")
    if header.max_timestamp != NO_TIMESTAMP and header.max_timestamp < header.base_timestamp:
        raise InvalidTimestampError(
            f"maxTimestamp {header.max_timestamp} is before baseTimestamp {header.base_timestamp}"
        )
    if max_timestamp_diff_ms is not None:
        check_timestamps(header, int(time.time() * 1000) if now_ms is None else now_ms,
                         max_timestamp_diff_ms)


def check_timestamps(header: BatchHeader, now_ms: int, max_timestamp_diff_ms: int) -> None:
    """A CreateTime batch's header timestamps within `max_timestamp_diff_ms` of `now_ms`
    (message.timestamp.difference.max.ms)."""
    if header.timestamp_type == 0:
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts != NO_TIMESTAMP and abs(ts - now_ms) > max_timestamp_diff_ms:
                raise InvalidTimestampError(
                    f"timestamp {ts} is out of range [{now_ms - max_timestamp_diff_ms}, "
                    f"{now_ms + max_timestamp_diff_ms}]"
                )


def patch_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Write the batch's baseOffset in place (outside the CRC: no checksum work)."""
    struct.pack_into(">q", batch, 0, base_offset)


def set_log_append_time(batch: bytearray | memoryview, ts_ms: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = ts_ms and recompute the CRC.

    As Kafka does when it assigns offsets in place (LogValidator), the base timestamp is left as
    the producer wrote it; readers take every record's timestamp from maxTimestamp.
    """
    (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
    _ATTRIBUTES.pack_into(batch, 21, attributes | ATTR_LOG_APPEND_TIME)
    _MAX_TS.pack_into(batch, 35, ts_ms)
    _CRC.pack_into(batch, 17, compute_crc(batch))


# --- records: decode and build (not on the produce/fetch path) -----------------------------------


@dataclass(slots=True)
class Record:
    """One decoded record; `offset` and `timestamp` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The key/value of a record in a control batch (transaction markers)."""

    version: int
    control_type: int  # CONTROL_ABORT / CONTROL_COMMIT
    coordinator_epoch: int


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A record-format (zigzag) varint at `pos`: (value, the position after it)."""
    if pos < len(buf):  # one byte (|value| < 64: lengths, deltas, counts): no loop
        b = buf[pos]
        if not b & 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptMessageError("truncated varint in record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptMessageError("varint is too long")


def write_varint(out: bytearray, value: int) -> None:
    """Append `value` to `out` as a record-format (zigzag) varint."""
    if 0 <= value < 64:  # one byte, the common case (deltas, counts, short lengths)
        out.append(value << 1)
        return
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """A varint-length-prefixed field (a key, value or header; length -1 is None)."""
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptMessageError("record field runs past the batch")
    return buf[pos : pos + length], pos + length


def decode_records(
    batch: bytes | bytearray | memoryview,
    *,
    max_uncompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode every record of one v2 batch (any codec).  Control batches decode too."""
    header = parse_header(batch)
    if header.magic != 2:
        raise CorruptMessageError(f"record batch magic {header.magic}, expected 2")
    body = memoryview(batch)[HEADER_SIZE : header.size]
    try:
        payload = codecs.decompress(
            header.compression, body, max_bytes=max_uncompressed_bytes
        )
    except codecs.UnsupportedCodecError as exc:
        raise UnsupportedCompressionTypeError(str(exc)) from exc
    except codecs.CompressionError as exc:
        raise CorruptMessageError(str(exc)) from exc
    log_append = header.timestamp_type == 1
    records: list[Record] = []
    pos = 0
    size = len(payload)
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > len(payload):
            raise CorruptMessageError("record runs past the batch")
        pos += 1  # record attributes (unused)
        ts_delta, pos = read_varint(payload, pos)
        offset_delta, pos = read_varint(payload, pos)
        key, pos = read_bytes(payload, pos)
        value, pos = read_bytes(payload, pos)
        header_count, pos = read_varint(payload, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(header_count):
            pair: list[bytes | None] = []
            for _field in (0, 1):  # key, value
                # a short one (one-byte even varint: 0..63 bytes) is cut without a call;
                # anything else (null, longer, truncated) takes read_bytes
                n = payload[pos] if pos < size else 1
                if n & 0x81 or pos + 1 + (n >> 1) > size:
                    item, pos = read_bytes(payload, pos)
                else:
                    item = payload[pos + 1 : pos + 1 + (n >> 1)]
                    pos += 1 + (n >> 1)
                pair.append(item)
            headers.append(((pair[0] or b"").decode("utf-8", "replace"), pair[1]))
        if pos != end:
            raise CorruptMessageError("record length does not match its fields")
        ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + offset_delta, ts, key, value, headers))
    return records


def parse_control_record(record: Record) -> ControlRecord:
    """Read a control record (key: version int16, type int16; value: version int16, epoch int32)."""
    if record.key is None or len(record.key) < 4:
        raise CorruptMessageError("control record key is too short")
    version, control_type = struct.unpack_from(">hh", record.key, 0)
    epoch = -1
    if record.value is not None and len(record.value) >= 6:
        _, epoch = struct.unpack_from(">hi", record.value, 0)
    return ControlRecord(version, control_type, epoch)


RecordInput = Record | tuple[bytes | None, bytes | None]


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = codecs.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int = -1,
    timestamp_ms: int | None = None,
) -> bytes:
    """Encode a v2 batch.  `records` are Record objects (their timestamps are used; their offsets
    are ignored: deltas are 0..n-1) or (key, value) pairs stamped `timestamp_ms` (default now).
    With `log_append_time_ms` the batch is LogAppendTime and every timestamp is that time."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    default_ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    norm: list[Record] = []
    for r in records:
        if isinstance(r, Record):
            norm.append(r)
        else:
            norm.append(Record(0, default_ts, r[0], r[1], []))
    if log_append_time_ms is not None:
        timestamps = [log_append_time_ms] * len(norm)
    else:
        timestamps = [r.timestamp for r in norm]
    base_ts = timestamps[0]
    max_ts = max(timestamps)
    payload = bytearray()
    for delta, (r, ts) in enumerate(zip(norm, timestamps, strict=True)):
        body = bytearray(b"\x00")
        write_varint(body, ts - base_ts)
        write_varint(body, delta)
        for blob in (r.key, r.value):
            if blob is None:
                write_varint(body, -1)
            else:
                write_varint(body, len(blob))
                body += blob
        write_varint(body, len(r.headers))
        for hkey, hval in r.headers:
            encoded = hkey.encode("utf-8")
            write_varint(body, len(encoded))
            body += encoded
            if hval is None:
                write_varint(body, -1)
            else:
                write_varint(body, len(hval))
                body += hval
        write_varint(payload, len(body))
        payload += body
    try:
        compressed = codecs.compress(compression, payload)
    except codecs.UnsupportedCodecError as exc:
        raise UnsupportedCompressionTypeError(str(exc)) from exc
    attributes = compression & ATTR_COMPRESSION_MASK
    if log_append_time_ms is not None:
        attributes |= ATTR_LOG_APPEND_TIME
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(compressed), partition_leader_epoch,
        2, 0, attributes, len(norm) - 1, base_ts, max_ts, producer_id, producer_epoch,
        base_sequence, len(norm),
    )
    out += compressed
    _CRC.pack_into(out, 17, compute_crc(out))
    return bytes(out)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value)], base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, is_transactional=True, is_control=True,
        timestamp_ms=timestamp_ms,
    )


__all__ = [
    "BatchHeader", "ControlRecord", "Record", "build_batch", "build_control_batch",
    "check_timestamps", "decode_records", "iter_batches", "parse_control_record", "parse_header",
    "patch_base_offset", "read_bytes", "read_varint", "records_magic", "set_log_append_time",
    "validate_batch", "write_varint",
]
