"""Magic v0/v1 message sets (Produce v0-v2) converted to exactly one RecordBatch v2.

Legacy layout, per message: offset int64, message_size int32, then the message: crc uint32
(CRC-32 of everything after it), magic int8, attributes int8 (bits 0-2 codec, bit 3 LogAppendTime
in v1), timestamp int64 (v1 only), key (int32 length, -1 = null), value (same).  A compressed
message is a *wrapper*: its value is a whole compressed message set of inner messages, which must
have the wrapper's magic and no codec of their own (Kafka's LogValidator refuses both).

The broker stores only v2 batches, so old producers' data is converted once, on produce, into ONE
v2 batch holding every message of the set (inner messages of wrappers included, in order).  One
batch is one ledger entry, so the append of a converted set is atomic: a failed append stores
nothing of the request and the client's retry cannot duplicate a stored prefix.  The batch is
compressed with the codec of the first wrapper (uncompressed when there is none): a producer uses
one `compression.type` for all its sets, so this is the codec it chose, and storing its data
uncompressed would multiply the bytes on the bookies and on every fetch; mixed codecs in one set
only come from hand-made requests.  Timestamps: v0 messages have none (-1); v1 messages keep
their own (CreateTime), except that inner messages of a v1 LogAppendTime wrapper take the
wrapper's timestamp, as readers of the legacy format do.  The batch itself is CreateTime; the
partition log stamps LogAppendTime when the topic asks for it.  Offsets the producer wrote are
ignored (the broker assigns them).  Magic v0 lz4 wrappers use the broken frame checksum of
Kafka < 0.10.

Sans-IO; never imports Trio or gateway code, and never returns more than one batch.
"""

from __future__ import annotations

import struct
import zlib

from protocols.kafka import compression as codecs
from protocols.kafka.errors import (
    CorruptMessageError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from protocols.kafka.record_batch import NO_TIMESTAMP, Record, build_batch

_LOG_ENTRY = struct.Struct(">qi")
_MESSAGE_V0 = struct.Struct(">Ibb")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_MIN_MESSAGE_BYTES = 4 + 1 + 1 + 4 + 4


class _Message:
    __slots__ = ("magic", "attributes", "timestamp", "key", "value")

    def __init__(
        self, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
    ) -> None:
        self.magic = magic
        self.attributes = attributes
        self.timestamp = timestamp
        self.key = key
        self.value = value


def _read_blob(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptMessageError("legacy message is truncated")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptMessageError("legacy message field runs past the message")
    return bytes(view[pos : pos + length]), pos + length


def _iter_messages(data: bytes | bytearray | memoryview) -> list[_Message]:
    view = memoryview(data)
    pos = 0
    out: list[_Message] = []
    while pos < len(view):
        if len(view) - pos < _LOG_ENTRY.size:
            raise CorruptMessageError(f"truncated legacy message at byte {pos}")
        _offset, size = _LOG_ENTRY.unpack_from(view, pos)
        start = pos + _LOG_ENTRY.size
        end = start + size
        if size < _MIN_MESSAGE_BYTES or end > len(view):
            raise CorruptMessageError(f"legacy message at byte {pos} has a bad size {size}")
        crc, magic, attributes = _MESSAGE_V0.unpack_from(view, start)
        if magic not in (0, 1):
            raise CorruptMessageError(f"legacy message magic {magic}")
        if zlib.crc32(view[start + 4 : end]) != crc:
            raise CorruptMessageError(f"legacy message CRC-32 mismatch at byte {pos}")
        field = start + _MESSAGE_V0.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if field + 8 > end:
                raise CorruptMessageError("legacy v1 message is truncated")
            (timestamp,) = _TIMESTAMP.unpack_from(view, field)
            field += 8
        key, field = _read_blob(view, field, end)
        value, field = _read_blob(view, field, end)
        if field != end:
            raise CorruptMessageError("legacy message size does not match its fields")
        out.append(_Message(magic, attributes, timestamp, key, value))
        pos = end
    return out


def convert_legacy_to_batch(
    data: bytes | bytearray | memoryview,
    *,
    max_uncompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Turn a magic v0/v1 message set into one v2 batch holding all of its messages."""
    records: list[Record] = []
    codec = codecs.NONE
    for message in _iter_messages(data):
        message_codec = message.attributes & 0x07
        if message_codec == codecs.NONE:
            records.append(Record(0, message.timestamp, message.key, message.value, []))
            continue
        if message_codec not in (codecs.GZIP, codecs.SNAPPY, codecs.LZ4):
            raise UnsupportedCompressionTypeError(
                f"codec {message_codec} is not allowed in magic {message.magic} messages"
            )
        if codec == codecs.NONE:
            codec = message_codec
        if message.value is None:
            raise InvalidRecordError("compressed legacy wrapper has no value")
        try:
            inner_bytes = codecs.decompress(
                message_codec, message.value, max_bytes=max_uncompressed_bytes,
                legacy_lz4=message.magic == 0 and message_codec == codecs.LZ4,
            )
        except codecs.CompressionError as exc:
            raise CorruptMessageError(f"legacy wrapper: {exc}") from exc
        inner = _iter_messages(inner_bytes)
        if not inner:
            raise InvalidRecordError("compressed legacy wrapper holds no messages")
        wrapper_log_append = message.magic == 1 and bool(message.attributes & 0x08)
        for m in inner:
            if m.magic != message.magic:
                raise InvalidRecordError(
                    f"Log record magic does not match outer magic {message.magic}"
                )
            if m.attributes & 0x07:
                raise InvalidRecordError("a compressed legacy wrapper holds a compressed message")
            ts = message.timestamp if wrapper_log_append else m.timestamp
            records.append(Record(0, ts, m.key, m.value, []))
    if not records:
        raise InvalidRecordError("legacy message set holds no messages")
    return build_batch(records, compression=codec)


def convert_legacy_message_set(
    data: bytes | bytearray | memoryview,
    *,
    max_uncompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[bytes]:
    """`convert_legacy_to_batch` as a one-element list (kept for callers written against it)."""
    return [convert_legacy_to_batch(data, max_uncompressed_bytes=max_uncompressed_bytes)]
