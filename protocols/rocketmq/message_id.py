"""Message ids: the offset message id (store host + commit-log offset) and its commit-log offset.

ledgerwire has no commit log; a message's "commit-log offset" is derived from where it is:
bits 62..48 a 15-bit hash of the topic, bits 47..36 the queue id (< 4096), bits 35..0 the queue
offset (< 2^36).  VIEW_MESSAGE_BY_ID decodes it back and finds the topic among those whose hash
matches.  The offset message id is the 16 bytes store IPv4 + port + commit-log offset in upper
case hex, as RocketMQ prints it.

This module must never do I/O.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from typing import NamedTuple

from protocols.rocketmq.errors import MessageIllegalError

QUEUE_BITS = 12
OFFSET_BITS = 36
TOPIC_BITS = 15
MAX_QUEUES = 1 << QUEUE_BITS
MAX_OFFSET = (1 << OFFSET_BITS) - 1

_ID = struct.Struct(">4siq")


class MessageLocation(NamedTuple):
    topic_hash: int
    queue_id: int
    queue_offset: int


@functools.lru_cache(maxsize=4096)  # every send answers with ids of a few topics
def topic_hash(topic: str) -> int:
    return zlib.crc32(topic.encode("utf-8")) & ((1 << TOPIC_BITS) - 1)


def commit_log_offset(topic: str, queue_id: int, queue_offset: int) -> int:
    if not 0 <= queue_id < MAX_QUEUES:
        raise ValueError(f"queue id {queue_id} does not fit a message id")
    return (topic_hash(topic) << (QUEUE_BITS + OFFSET_BITS)) | (queue_id << OFFSET_BITS) | (
        queue_offset & MAX_OFFSET)


def decode_commit_log_offset(offset: int) -> MessageLocation:
    return MessageLocation(
        (offset >> (QUEUE_BITS + OFFSET_BITS)) & ((1 << TOPIC_BITS) - 1),
        (offset >> OFFSET_BITS) & (MAX_QUEUES - 1),
        offset & MAX_OFFSET,
    )


def offset_message_id(store_host: str, store_port: int, commit_offset: int) -> str:
    if 0 <= commit_offset < 1 << 63:  # what commit_log_offset gives: a plain hex tail
        return _id_prefix(store_host, store_port) + f"{commit_offset:016X}"
    return _ID.pack(_store_ip(store_host), store_port, commit_offset).hex().upper()


def _store_ip(store_host: str) -> bytes:
    try:
        return socket.inet_aton(store_host)
    except OSError:
        return b"\x7f\x00\x00\x01"


@functools.lru_cache(maxsize=64)  # the broker's advertised address(es)
def _id_prefix(store_host: str, store_port: int) -> str:
    """The id's store host and port as upper-case hex (what _ID packs before the offset)."""
    return _ID.pack(_store_ip(store_host), store_port, 0).hex().upper()[:16]


def decode_offset_message_id(message_id: str) -> tuple[str, int, int]:
    """(store host, store port, commit-log offset); MessageIllegalError when malformed."""
    try:
        raw = bytes.fromhex(message_id)
    except ValueError as exc:
        raise MessageIllegalError(f"message id {message_id!r} is not hex") from exc
    if len(raw) != _ID.size:
        raise MessageIllegalError(f"message id {message_id!r} is not an offset message id")
    ip, port, offset = _ID.unpack(raw)
    return socket.inet_ntoa(ip), port, offset
