"""A stored batch straight to the stored-message encoding a pull answer carries (issue 15).

The general path decodes each record of a batch into a `Record`, turns its headers into a
properties dict and a `MessageMeta` (`from_record`), builds a `StoredMessage` and encodes it.
For what RocketMQ clients wrote, that is a round trip: the record's headers already are the
properties in order (unique names, no separators) followed by the `__rmq` header.  Here such a
batch is read once and every record becomes its stored-message bytes directly (properties
copied as bytes), with the pull's tag filter applied on the way.

`encode_batch` gives the same bytes as `encode_stored_message(stored_message(...))` for every
record it accepts; a batch it does not recognise as plainly RocketMQ-written (compressed,
control, a record without a valid `__rmq` header, a header name repeated, empty or holding a
separator, a value that is not UTF-8 or holds a separator, a key not in KEYS, anything
truncated) gives None and the caller takes the general path, which also reports corruption.

This module must never do I/O, touch broker state, or raise on any input.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from protocols.kafka.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    read_bytes,
    read_varint,
)
from protocols.rocketmq.message_encoding import (
    MESSAGE_MAGIC_CODE,
    SYS_FLAG_BORNHOST_V6,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_STOREHOST_V6,
)
from protocols.rocketmq.message_id import MAX_OFFSET, OFFSET_BITS, QUEUE_BITS, topic_hash

# the `__rmq` header (message_encoding._META) with the born IPv4 as its 4 bytes
_META = struct.Struct(">Bii4siqi")
_META_NAME = b"__rmq"
_KEYS = b"KEYS"
_TAGS = b"TAGS"
_FIXED = struct.Struct(">iIiiiqqiq4siq4siiqi")  # as message_encoding._STORED_FIXED
_FIXED_SIZE = _FIXED.size + 1 + 2
_SYS_FLAG_CLEARED = ~(SYS_FLAG_BORNHOST_V6 | SYS_FLAG_STOREHOST_V6 | SYS_FLAG_COMPRESSED)

# (record offset, (stored-message bytes, their length) or None when the filter skips it)
Encoded = list[tuple[int, tuple[bytes, int] | None]]


class PullEncoding:
    """What every message of one pull shares: queue, topic, store host and the tag filter
    (`wanted(tag)`, given the TAGS property as text or None; None: every message)."""

    __slots__ = ("_queue_id", "_clo_base", "_tail", "_store_ip", "_store_port", "_wanted")

    def __init__(self, topic: str, queue_id: int, store_ip: bytes, store_port: int,
                 wanted: Callable[[str | None], bool] | None) -> None:  # fmt: skip
        name = topic.encode("utf-8")
        usable = len(name) <= 127 and 0 <= queue_id < 1 << QUEUE_BITS
        self._queue_id = queue_id
        self._clo_base = (topic_hash(topic) << (QUEUE_BITS + OFFSET_BITS)) | (
            queue_id << OFFSET_BITS)
        self._tail = bytes((len(name),)) + name if usable else b""  # b"": never used
        self._store_ip = store_ip
        self._store_port = store_port
        self._wanted = wanted

    def encode_batch(self, batch: bytes | bytearray | memoryview, first_offset: int
                     ) -> Encoded | None:  # fmt: skip
        """The records of `batch` at or after `first_offset`, encoded; None: use the general
        path for this batch (for truncated or odd input too: the general path reports it)."""
        if not self._tail:
            return None
        try:  # one call per batch: the whole pass is in here
            (base_offset, batch_length, _epoch, magic, _crc, attributes, _last_delta, base_ts,
             max_ts, _pid, _pepoch, _seq, count) = HEADER.unpack_from(batch, 0)
            if magic != 2 or attributes & (ATTR_COMPRESSION_MASK | ATTR_CONTROL):
                return None
            size = batch_length + LOG_OVERHEAD
            if size > len(batch) or size < HEADER_SIZE:
                return None
            payload = batch if type(batch) is bytes else bytes(batch)  # read in place, not copied
            end_all = size
            log_append = attributes & ATTR_LOG_APPEND_TIME
            out: Encoded = []
            wanted = self._wanted
            fixed_and_topic = _FIXED_SIZE + len(self._tail) - 1
            pos = HEADER_SIZE
            # every varint: one byte read inline (the common case), longer ones by read_varint;
            # the record's and the body's lengths also in two bytes (up to 8191: a message < 8 KB)
            for _ in range(count):
                n = payload[pos]
                if not n & 0x80:
                    length, pos = (n >> 1) ^ -(n & 1), pos + 1
                elif not payload[pos + 1] & 0x80:
                    n = (n & 0x7F) | (payload[pos + 1] << 7)
                    length, pos = (n >> 1) ^ -(n & 1), pos + 2
                else:
                    length, pos = read_varint(payload, pos)
                end = pos + length
                if length < 0 or end > end_all:
                    return None
                pos += 1  # record attributes
                n = payload[pos]
                if n & 0x80:
                    ts_delta, pos = read_varint(payload, pos)
                else:
                    ts_delta, pos = (n >> 1) ^ -(n & 1), pos + 1
                n = payload[pos]
                if n & 0x80:
                    offset_delta, pos = read_varint(payload, pos)
                else:
                    offset_delta, pos = (n >> 1) ^ -(n & 1), pos + 1
                n = payload[pos]
                if n & 0x80:
                    key_length, pos = read_varint(payload, pos)
                else:
                    key_length, pos = (n >> 1) ^ -(n & 1), pos + 1
                has_key = key_length >= 0
                if has_key:
                    pos += key_length
                n = payload[pos]
                if not n & 0x81:  # a short body
                    body, pos = payload[pos + 1:pos + 1 + (n >> 1)], pos + 1 + (n >> 1)
                elif n & 0x80 and not n & 1 and not payload[pos + 1] & 0x80:  # 64 .. 8191 bytes
                    n = ((n & 0x7F) | (payload[pos + 1] << 7)) >> 1
                    body, pos = payload[pos + 2:pos + 2 + n], pos + 2 + n
                else:
                    value, pos = read_bytes(payload, pos)
                    body = value or b""
                n = payload[pos]
                if n & 0x80:
                    header_count, pos = read_varint(payload, pos)
                else:
                    header_count, pos = (n >> 1) ^ -(n & 1), pos + 1
                if pos > end or header_count < 1:
                    return None
                parts: list[bytes] = []  # name, b"\x01", value, b"\x02" of each property
                meta: tuple[int, int, int, bytes, int, int, int] | None = None
                tags: bytes | None = None  # the TAGS property's text; a null TAGS is no tag
                for _h in range(header_count):
                    # both fields cut inline when short (a one-byte even length: every header of
                    # a message a RocketMQ client wrote), by read_bytes otherwise
                    n = payload[pos]
                    if n & 0x81:
                        name, pos = read_bytes(payload, pos)
                    else:
                        name, pos = payload[pos + 1:pos + 1 + (n >> 1)], pos + 1 + (n >> 1)
                    n = payload[pos]
                    if n & 0x81:
                        value, pos = read_bytes(payload, pos)
                    else:
                        value, pos = payload[pos + 1:pos + 1 + (n >> 1)], pos + 1 + (n >> 1)
                    if not name:
                        return None
                    if value is None:
                        value = b""
                    elif name == _TAGS:
                        tags = value
                    if name == _META_NAME:
                        if meta is not None or len(value) != _META.size:
                            return None
                        meta = _META.unpack(value)
                        if meta[0] != 1:
                            return None
                        continue
                    parts += (name, b"\x01", value, b"\x02")
                if pos != end or meta is None:
                    return None
                named = header_count - 1  # every header but the one __rmq is a property
                names = parts[::4]
                props = b"".join(parts)
                props_size = len(props)
                if props.count(1) != named or props.count(2) != named or \
                        len(set(names)) != named or (has_key and _KEYS not in names):
                    return None
                if not props.isascii():
                    props.decode("utf-8")  # UnicodeDecodeError (a ValueError): general path
                if props_size > 32767:
                    return None
                offset = base_offset + offset_delta
                if offset < first_offset:
                    continue
                if wanted is not None and \
                        not wanted(tags.decode("utf-8") if tags is not None else None):
                    out.append((offset, None))
                    continue
                timestamp = max_ts if log_append else base_ts + ts_delta
                _v, flag, sys_flag, born_ip, born_port, store_ts, reconsume = meta
                body_size = len(body)
                total = fixed_and_topic + body_size + props_size
                encoded = b"".join((
                    _FIXED.pack(
                        total, MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, self._queue_id,
                        flag, offset, self._clo_base | (offset & MAX_OFFSET),
                        sys_flag & _SYS_FLAG_CLEARED, timestamp, born_ip, born_port,
                        store_ts or timestamp, self._store_ip, self._store_port, reconsume, 0,
                        body_size),
                    body, self._tail, props_size.to_bytes(2, "big"), props))
                out.append((offset, (encoded, total)))
            if pos != end_all:
                return None
            return out
        except Exception:  # noqa: BLE001 - truncated or odd input: the general path reports it
            return None
