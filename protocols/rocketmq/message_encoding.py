"""RocketMQ message layouts: properties strings, batch bodies, the stored-message encoding that
pull responses carry, and the mapping to and from a Kafka record (the stored form).

Stored form (one offset space with Kafka): a RocketMQ message is one Kafka v2 record whose
value is the body, whose key is the KEYS property, and whose headers are the message properties
(TAGS, KEYS, UNIQ_KEY, user properties) in order, plus one binary header `__rmq` holding what
Kafka has no place for (flag, sysFlag, born host, store time, reconsume times).  A Kafka-written
record read over RocketMQ becomes a message whose properties are its headers (values decoded as
UTF-8, characters that would break the properties string dropped) and KEYS its key.

This module must never do I/O or touch broker state.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocols.kafka.built_batch import BuiltBatch
from protocols.kafka.record_batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    Record,
    compute_crc,
    write_varint,
)
from protocols.rocketmq.errors import MessageIllegalError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

MESSAGE_MAGIC_CODE = 0xDAA320A7  # stored-message magic, v1 (topic length is one byte)
BATCH_MAGIC_CODE = MESSAGE_MAGIC_CODE

SYS_FLAG_COMPRESSED = 0x1
SYS_FLAG_MULTI_TAGS = 0x2
SYS_FLAG_TRANSACTION_PREPARED = 0x4
SYS_FLAG_TRANSACTION_COMMIT = 0x8
SYS_FLAG_TRANSACTION_ROLLBACK = 0xC
SYS_FLAG_TRANSACTION_MASK = 0xC
SYS_FLAG_BORNHOST_V6 = 0x10
SYS_FLAG_STOREHOST_V6 = 0x20

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"

META_HEADER = "__rmq"
_META = struct.Struct(">BiiIiqi")  # version, flag, sysFlag, born ip, born port, store ts, reconsume
_META_VERSION = 1
_META_HEADER_NAME = bytes((len(META_HEADER) << 1,)) + META_HEADER.encode()  # varint length + name
_META_VALUE_LENGTH = bytes((_META.size << 1,))
_CRC = struct.Struct(">I")

MAX_DECOMPRESSED_BODY = 64 << 20


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int: tag codes."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


# --- properties -------------------------------------------------------------------------------


def decode_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            props[name] = value
    return props


def encode_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def _clean(text: str) -> str:
    return text.replace(NAME_VALUE_SEPARATOR, "").replace(PROPERTY_SEPARATOR, "")


# --- message model ----------------------------------------------------------------------------


@dataclass
class MessageMeta:
    flag: int = 0
    sys_flag: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    reconsume_times: int = 0


@dataclass
class StoredMessage:
    """One message as a pull response (or VIEW_MESSAGE_BY_ID) carries it."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("0.0.0.0", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)


@functools.lru_cache(maxsize=1024)  # per message, for a handful of client and broker hosts
def ipv4(host: str) -> bytes:
    """The 4 bytes a stored message carries for `host` (127.0.0.1's for anything else)."""
    try:
        return socket.inet_aton(host)
    except OSError:
        return b"\x7f\x00\x00\x01"


def to_record(body: bytes, properties: dict[str, str], meta: MessageMeta, timestamp: int) -> Record:
    """The Kafka record a RocketMQ message is stored as."""
    keys = properties.get(PROPERTY_KEYS)
    headers: list[tuple[str, bytes | None]] = [
        (k, v.encode("utf-8")) for k, v in properties.items()]
    ip = int.from_bytes(ipv4(meta.born_host[0]), "big")
    headers.append((META_HEADER, _META.pack(_META_VERSION, meta.flag, meta.sys_flag, ip,
                                            meta.born_host[1], meta.store_timestamp,
                                            meta.reconsume_times)))
    return Record(0, timestamp, keys.encode("utf-8") if keys is not None else None, body, headers)


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


# the record-format varints of 0..8191 (one or two bytes): every length of a small message,
# looked up instead of written by a call (message_batch runs on every send)
_LENGTHS = tuple(_varint_bytes(n) for n in range(8192))


def message_batch(body: bytes, properties: dict[str, str], meta: MessageMeta,
                  timestamp: int) -> BuiltBatch:
    """The stored batch of one message, built in one pass: the same bytes and header as
    built_batch([to_record(body, properties, meta, timestamp)]) (a send's hot path)."""
    ip = int.from_bytes(ipv4(meta.born_host[0]), "big")
    record = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta 0, offset delta 0
    keys = properties.get(PROPERTY_KEYS)
    if keys is None:
        record.append(1)  # varint -1: no key
    else:
        key = keys.encode("utf-8")
        n = len(key)
        record += _LENGTHS[n] if n < 8192 else _varint_bytes(n)
        record += key
    n = len(body)
    record += _LENGTHS[n] if n < 8192 else _varint_bytes(n)
    record += body
    count = len(properties) + 1
    record += _LENGTHS[count] if count < 8192 else _varint_bytes(count)
    for name, value in properties.items():
        part = name.encode("utf-8")
        n = len(part)
        record += _LENGTHS[n] if n < 8192 else _varint_bytes(n)
        record += part
        part = value.encode("utf-8")
        n = len(part)
        record += _LENGTHS[n] if n < 8192 else _varint_bytes(n)
        record += part
    record += _META_HEADER_NAME
    record += _META_VALUE_LENGTH
    record += _META.pack(_META_VERSION, meta.flag, meta.sys_flag, ip, meta.born_host[1],
                         meta.store_timestamp, meta.reconsume_times)
    batch = bytearray(HEADER_SIZE)
    batch += _LENGTHS[len(record)] if len(record) < 8192 else _varint_bytes(len(record))
    batch += record
    size = len(batch) - LOG_OVERHEAD
    HEADER.pack_into(batch, 0, 0, size, -1, 2, 0, 0, 0, timestamp, timestamp, NO_PRODUCER_ID,
                     -1, NO_SEQUENCE, 1)
    crc = compute_crc(batch)
    _CRC.pack_into(batch, 17, crc)
    return BuiltBatch(bytes(batch), BatchHeader(0, size, -1, 2, crc, 0, 0, timestamp, timestamp,
                                                NO_PRODUCER_ID, -1, NO_SEQUENCE, 1))


def from_record(record: Record) -> tuple[bytes, dict[str, str], MessageMeta]:
    """Body, properties and meta of a stored record, whichever protocol wrote it."""
    props: dict[str, str] = {}
    meta: MessageMeta | None = None
    for name, value in record.headers:
        if name == META_HEADER and value is not None and len(value) == _META.size:
            version, flag, sys_flag, ip, port, store_ts, reconsume = _META.unpack(value)
            if version == _META_VERSION:
                meta = MessageMeta(flag, sys_flag, (socket.inet_ntoa(ip.to_bytes(4, "big")), port),
                                   store_ts, reconsume)
                continue
        # separators cannot be in what a RocketMQ client wrote; only Kafka headers need cleaning
        if NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            name = _clean(name)
        if name:
            text = (value or b"").decode("utf-8", "replace")
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                text = _clean(text)
            props[name] = text
    if PROPERTY_KEYS not in props and record.key is not None:
        props[PROPERTY_KEYS] = _clean(record.key.decode("utf-8", "replace"))
    if meta is None:
        meta = MessageMeta(store_timestamp=record.timestamp)
    return record.value or b"", props, meta


# --- send bodies ------------------------------------------------------------------------------


def decompress_body(body: bytes) -> bytes:
    """A zlib-compressed body (sysFlag bit 0), bounded so a zip bomb cannot exhaust memory."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, MAX_DECOMPRESSED_BODY)
    except zlib.error as exc:
        raise MessageIllegalError(f"compressed body does not inflate: {exc}") from exc
    if inflater.unconsumed_tail:
        raise MessageIllegalError("compressed body inflates past the size limit")
    return out


@dataclass
class BatchedMessage:
    body: bytes
    flag: int
    properties: dict[str, str]


_BATCH_FIXED = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length


def decode_batch_body(body: bytes) -> list[BatchedMessage]:
    """A SEND_BATCH_MESSAGE body: repeated (size, magic, crc, flag, body, properties)."""
    out: list[BatchedMessage] = []
    pos = 0
    view = memoryview(body)
    while pos < len(body):
        if len(body) - pos < _BATCH_FIXED.size + 2:
            raise MessageIllegalError("batch body truncated")
        total, _magic, _crc, flag, body_length = _BATCH_FIXED.unpack_from(view, pos)
        if body_length < 0 or total < _BATCH_FIXED.size + 2 + body_length or \
                pos + total > len(body):
            raise MessageIllegalError("batch message length is inconsistent")
        start = pos + _BATCH_FIXED.size
        msg_body = bytes(view[start : start + body_length])
        (prop_length,) = struct.unpack_from(">h", view, start + body_length)
        prop_start = start + body_length + 2
        if prop_length < 0 or prop_start + prop_length != pos + total:
            raise MessageIllegalError("batch message properties length is inconsistent")
        props = decode_properties(bytes(view[prop_start : prop_start + prop_length])
                                  .decode("utf-8", "replace"))
        out.append(BatchedMessage(msg_body, flag, props))
        pos += total
    if not out:
        raise MessageIllegalError("empty batch")
    return out


def encode_batch_body(messages: Iterable[BatchedMessage]) -> bytes:
    """For tests and tools: the body a batch producer sends."""
    parts = []
    for m in messages:
        props = encode_properties(m.properties).encode("utf-8")
        total = _BATCH_FIXED.size + len(m.body) + 2 + len(props)
        parts.append(_BATCH_FIXED.pack(total, BATCH_MAGIC_CODE - (1 << 32),
                                       zlib.crc32(m.body) & 0x7FFFFFFF, m.flag, len(m.body))
                     + m.body + struct.pack(">h", len(props)) + props)
    return b"".join(parts)


# --- stored-message encoding ------------------------------------------------------------------

_STORED_HEAD = struct.Struct(">iIiiiqqiq")  # size, magic, crc, qid, flag, qoff, phys, sysflag, born
_HOST = struct.Struct(">4si")
_STORED_MID = struct.Struct(">q")  # store timestamp
_STORED_TAIL = struct.Struct(">iq")  # reconsume times, prepared transaction offset
# everything before the body in one pack: the four above, then the body length
_STORED_FIXED = struct.Struct(">iIiiiqqiq4siq4siiqi")
_FIXED_SIZE = _STORED_FIXED.size + 1 + 2  # + topic length byte + properties length


def encode_stored_message(m: StoredMessage) -> bytes:
    topic = m.topic.encode("utf-8")
    if len(topic) > 127:
        raise MessageIllegalError("topic name too long for the stored-message encoding")
    props = encode_properties(m.properties).encode("utf-8")
    if len(props) > 32767:
        raise MessageIllegalError("properties too long for the stored-message encoding")
    sys_flag = m.sys_flag & ~(SYS_FLAG_BORNHOST_V6 | SYS_FLAG_STOREHOST_V6 | SYS_FLAG_COMPRESSED)
    body = m.body
    return b"".join((
        _STORED_FIXED.pack(
            _FIXED_SIZE + len(body) + len(topic) + len(props), MESSAGE_MAGIC_CODE,
            zlib.crc32(body) & 0x7FFFFFFF, m.queue_id, m.flag, m.queue_offset,
            m.commit_log_offset, sys_flag, m.born_timestamp, ipv4(m.born_host[0]),
            m.born_host[1], m.store_timestamp, ipv4(m.store_host[0]), m.store_host[1],
            m.reconsume_times, m.prepared_transaction_offset, len(body)),
        body, len(topic).to_bytes(1, "big"), topic, len(props).to_bytes(2, "big"), props,
    ))


def decode_stored_messages(data: bytes) -> list[StoredMessage]:
    """For tests and tools: the messages of a pull response body."""
    out: list[StoredMessage] = []
    pos = 0
    try:
        while pos < len(data):
            (size, magic, _crc, qid, flag, qoff, phys, sys_flag, born_ts) = \
                _STORED_HEAD.unpack_from(data, pos)
            if magic != MESSAGE_MAGIC_CODE:
                raise MessageIllegalError(f"bad stored-message magic {magic:#x}")
            p = pos + _STORED_HEAD.size
            born_ip, born_port = _HOST.unpack_from(data, p)
            p += _HOST.size
            (store_ts,) = _STORED_MID.unpack_from(data, p)
            p += _STORED_MID.size
            store_ip, store_port = _HOST.unpack_from(data, p)
            p += _HOST.size
            reconsume, prepared = _STORED_TAIL.unpack_from(data, p)
            p += _STORED_TAIL.size
            (body_length,) = struct.unpack_from(">i", data, p)
            p += 4
            body = data[p : p + body_length]
            p += body_length
            topic_length = data[p]
            topic = data[p + 1 : p + 1 + topic_length].decode("utf-8")
            p += 1 + topic_length
            (prop_length,) = struct.unpack_from(">h", data, p)
            props = decode_properties(data[p + 2 : p + 2 + prop_length].decode("utf-8"))
            p += 2 + prop_length
            if p - pos != size:
                raise MessageIllegalError("stored message size does not match its fields")
            out.append(StoredMessage(
                topic, qid, qoff, phys, body, props, flag, sys_flag, born_ts,
                (socket.inet_ntoa(born_ip), born_port), store_ts,
                (socket.inet_ntoa(store_ip), store_port), reconsume, prepared))
            pos += size
    except (struct.error, IndexError) as exc:
        raise MessageIllegalError(f"stored message truncated: {exc}") from exc
    return out
