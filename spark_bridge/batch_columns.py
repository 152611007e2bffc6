"""Decode one record batch straight into column lists (the per-record decoders).

The replay decodes in bulk (bulk_decode.py) and comes here where that path is not available or
refuses a group of batches (and for the tests that compare the two).

`protocols.kafka.record_batch.decode_records` builds a `Record` object per record and calls a
function per varint; replay decodes every record of a topic, so this module fills the columns
the Arrow batch is built from directly, in one of two ways:
  - compiled: aiokafka's Cython RecordBatch v2 decoder (aiokafka/record/_crecords, a C
    extension of a well-kept client; same layout, it decompresses with cramjam) walks the
    records in C, ~3x faster per record than Python here; used when it imports;
  - pure Python: the same decoding with the varints inlined (codecs through
    protocols/kafka/compression.py); used when aiokafka is missing and whenever the compiled
    decoder refuses a batch (corrupt data, a codec it lacks, a header key that is not UTF-8),
    so such a batch gets the pure path's answer (rows or CorruptMessageError).
Both are checked against decode_records in tests/spark_bridge/test_spark_batch_columns.py.

Sans-IO and pure: it must never accept a record that runs past its batch, nor return rows
outside the requested offset range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocols.kafka import compression as codecs
from protocols.kafka.errors import CorruptMessageError, UnsupportedCompressionTypeError
from protocols.kafka.record_batch import HEADER_SIZE, BatchHeader

Headers = list[dict[str, object]]


def _compiled_decoder() -> Any:
    try:
        from aiokafka.record._crecords.default_records import DefaultRecordBatch
    except ImportError:  # executors without aiokafka use the pure-Python decoder
        return None
    return DefaultRecordBatch


_CompiledBatch: Any = _compiled_decoder()


@dataclass
class Columns:
    """Columns of decoded rows; `headers` is filled only when wanted."""

    want_headers: bool
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # ms
    ts_types: list[int] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, batch: bytes, header: BatchHeader, start: int, end: int) -> None:
        """The records of `batch` in [start, end), decoded now."""
        decode_batch_columns(batch, header, start, end, self)

    def extend(self, other: Columns) -> None:
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.offsets.extend(other.offsets)
        self.timestamps.extend(other.timestamps)
        self.ts_types.extend(other.ts_types)
        if self.want_headers:
            self.headers.extend(other.headers)


def decode_batch_columns(batch: bytes, header: BatchHeader, start: int, end: int,
                         out: Columns, *, compiled: bool = True) -> None:  # fmt: skip
    """Append the records of `batch` whose offsets lie in [start, end) to `out`
    (compiled=False: always the pure-Python decoder)."""
    if compiled and _CompiledBatch is not None and _decode_compiled(batch, header, start, end,
                                                                    out):  # fmt: skip
        return
    body = memoryview(batch)[HEADER_SIZE : header.size]
    try:
        payload = bytes(codecs.decompress(header.compression, body))
    except codecs.UnsupportedCodecError as exc:
        raise UnsupportedCompressionTypeError(str(exc)) from exc
    except codecs.CompressionError as exc:
        raise CorruptMessageError(str(exc)) from exc
    try:
        _decode_records(payload, header, start, end, out)
    except IndexError:
        raise CorruptMessageError("record runs past the batch") from None


def _decode_compiled(batch: bytes, header: BatchHeader, start: int, end: int,
                     out: Columns) -> bool:  # fmt: skip
    """The compiled decoder; False (and `out` untouched) if it refused the batch."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    headers: list[Headers] = []
    add_key, add_value = keys.append, values.append
    add_offset, add_ts, add_headers = offsets.append, timestamps.append, headers.append
    whole = start <= header.base_offset and header.base_offset + header.last_offset_delta < end
    want_headers = out.want_headers
    try:
        records = _CompiledBatch(batch[: header.size] if len(batch) != header.size else batch)
        if whole and not want_headers:
            for r in records:
                add_key(r.key)
                add_value(r.value)
                add_offset(r.offset)
                add_ts(r.timestamp)
        else:
            for r in records:
                offset = r.offset
                if offset < start or offset >= end:
                    continue
                add_key(r.key)
                add_value(r.value)
                add_offset(offset)
                add_ts(r.timestamp)
                if want_headers:
                    add_headers([{"key": k, "value": v} for k, v in r.headers])
    except Exception:  # noqa: BLE001 - the pure decoder decides (rows or CorruptMessageError)
        return False
    if len(offsets) > header.records_count:
        return False
    if whole and offsets and (min(offsets) < start or max(offsets) >= end):
        return False  # a record's own offset delta disagrees with the header: damaged
    out.keys.extend(keys)
    out.values.extend(values)
    out.offsets.extend(offsets)
    out.timestamps.extend(timestamps)
    out.ts_types.extend([header.timestamp_type] * len(offsets))
    if want_headers:
        out.headers.extend(headers)
    return True


def _decode_records(payload: bytes, header: BatchHeader, start: int, end: int,
                    out: Columns) -> None:  # fmt: skip
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append = header.timestamp_type == 1
    ts_type = header.timestamp_type
    keys, values, offsets = out.keys, out.values, out.offsets
    timestamps, ts_types = out.timestamps, out.ts_types
    want_headers, header_rows = out.want_headers, out.headers
    size = len(payload)
    pos = 0
    for _ in range(header.records_count):
        # record length
        b = payload[pos]; pos += 1  # noqa: E702
        if b < 0x80:
            v = b
        else:
            v, shift = b & 0x7F, 7
            while True:
                b = payload[pos]; pos += 1  # noqa: E702
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        length = (v >> 1) ^ -(v & 1)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptMessageError("record runs past the batch")
        pos += 1  # attributes
        # timestamp delta
        b = payload[pos]; pos += 1  # noqa: E702
        if b < 0x80:
            v = b
        else:
            v, shift = b & 0x7F, 7
            while True:
                b = payload[pos]; pos += 1  # noqa: E702
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        ts_delta = (v >> 1) ^ -(v & 1)
        # offset delta
        b = payload[pos]; pos += 1  # noqa: E702
        if b < 0x80:
            v = b
        else:
            v, shift = b & 0x7F, 7
            while True:
                b = payload[pos]; pos += 1  # noqa: E702
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        offset = base_offset + ((v >> 1) ^ -(v & 1))
        if offset < start or offset >= end:
            pos = record_end
            continue
        # key
        b = payload[pos]; pos += 1  # noqa: E702
        if b < 0x80:
            v = b
        else:
            v, shift = b & 0x7F, 7
            while True:
                b = payload[pos]; pos += 1  # noqa: E702
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        n = (v >> 1) ^ -(v & 1)
        if n < 0:
            key = None
        else:
            key = payload[pos : pos + n]
            pos += n
        # value
        b = payload[pos]; pos += 1  # noqa: E702
        if b < 0x80:
            v = b
        else:
            v, shift = b & 0x7F, 7
            while True:
                b = payload[pos]; pos += 1  # noqa: E702
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        n = (v >> 1) ^ -(v & 1)
        if n < 0:
            value = None
        else:
            value = payload[pos : pos + n]
            pos += n
        if pos > record_end:
            raise CorruptMessageError("record length does not match its fields")
        keys.append(key)
        values.append(value)
        offsets.append(offset)
        timestamps.append(header.max_timestamp if log_append else base_ts + ts_delta)
        ts_types.append(ts_type)
        if want_headers:
            header_rows.append(_headers(payload, pos, record_end))
        pos = record_end
    if pos != size:
        raise CorruptMessageError("records do not fill the batch")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptMessageError("truncated varint in record")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptMessageError("varint is too long")


def _headers(buf: bytes, pos: int, end: int) -> Headers:
    count, pos = _read_varint(buf, pos)
    out: Headers = []
    for _ in range(count):
        n, pos = _read_varint(buf, pos)
        hkey = buf[pos : pos + max(n, 0)].decode("utf-8", "replace")
        pos += max(n, 0)
        n, pos = _read_varint(buf, pos)
        hval = None if n < 0 else buf[pos : pos + n]
        pos += max(n, 0)
        out.append({"key": hkey, "value": hval})
    if pos != end:
        raise CorruptMessageError("record length does not match its fields")
    return out
