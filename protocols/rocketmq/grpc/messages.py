"""RocketMQ 5 messages <-> the stored form shared with 4.x and Kafka, and receipt handles.

A 5.x `Message` carries its system properties as fields (tag, keys, message id, message group,
delivery timestamp, ...); the stored form (protocols/rocketmq/message_encoding.py) carries them
as the 4.x property names, so a 4.x consumer and a Kafka consumer read a 5.x producer's message
as they read each other's: TAGS, KEYS (space-separated), UNIQ_KEY, __SHARDINGKEY (the message
group), TIMER_DELIVER_MS (a delivery time), user properties as they are.

A recall handle names a timed message while it waits: the broker (a cluster's bundle broker),
the offset in its timer queue and the message id, base64url-encoded; RecallMessage checks that
the message there has that id and topic, so a forged handle recalls nothing else.

A receipt handle names one delivery of one record: "<partition>.<offset>.<delivery count>.<n>"
(n makes handles of redeliveries distinct).  It is opaque to clients and carries no secret:
acknowledging with it needs the group's and topic's permissions like any other call.

This module never does I/O.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from dataclasses import dataclass

from google.protobuf import duration_pb2, timestamp_pb2

from protocols.rocketmq.delay_levels import PROPERTY_TIMER_DELIVER_MS, TIMER_PROPERTIES
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    MessageMeta,
)

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # RocketMQ 5's message group, as 4.x names it
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_CHECK_IMMUNITY_S = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
# Properties that are fields of a 5.x message, never user properties.
SYSTEM_PROPERTIES = frozenset({
    PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_SHARDING_KEY, PROPERTY_DELAY,
    PROPERTY_TRANSACTION_PREPARED, PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID, PROPERTY_TRACE_CONTEXT, PROPERTY_CHECK_IMMUNITY_S,
    "WAIT", "MAX_OFFSET", "MIN_OFFSET", "CONSUME_START_TIME", "MAX_RECONSUME_TIMES",
    "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "CLUSTER", "__transactionId__", *TIMER_PROPERTIES,
})
MAX_PROPERTIES_BYTES = 16 * 1024


@dataclass(frozen=True)
class OutgoingMessage:
    """A 5.x message as the 4.x send path stores it."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    message_type: int
    message_id: str


MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31: protobuf's upper bound


def to_millis(ts: timestamp_pb2.Timestamp) -> int:
    if ts.seconds > MAX_TIMESTAMP_SECONDS:
        # rocketmq-python-client 5.1.2 puts milliseconds in `seconds` for delivery_timestamp;
        # no real time is that far away, so such a value is read as milliseconds.
        return ts.seconds
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def duration_millis(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def from_grpc(message: pb.Message) -> OutgoingMessage:
    """Validate a producer's message and give its stored properties."""
    system = message.system_properties
    topic = message.topic.name
    if not topic:
        raise RpcFailure(pb.ILLEGAL_TOPIC, "message has no topic")
    if not system.message_id:
        raise RpcFailure(pb.ILLEGAL_MESSAGE_ID, "message has no message id")
    props: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTIES or "\x01" in key + value or "\x02" in key + value:
            raise RpcFailure(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"illegal user property {key!r}")
        props[key] = value
    if system.HasField("tag"):
        if not system.tag or "|" in system.tag:
            raise RpcFailure(pb.ILLEGAL_MESSAGE_TAG, f"illegal tag {system.tag!r}")
        props[PROPERTY_TAGS] = system.tag
    if system.keys:
        props[PROPERTY_KEYS] = " ".join(system.keys)
    props[PROPERTY_UNIQ_KEY] = system.message_id
    kind = system.message_type
    if system.HasField("message_group"):
        props[PROPERTY_SHARDING_KEY] = system.message_group
    if system.HasField("delivery_timestamp"):
        props[PROPERTY_TIMER_DELIVER_MS] = str(to_millis(system.delivery_timestamp))
    if kind == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = duration_millis(system.orphaned_transaction_recovery_duration) // 1000
            props[PROPERTY_CHECK_IMMUNITY_S] = str(max(0, seconds))
    if system.HasField("trace_context"):
        props[PROPERTY_TRACE_CONTEXT] = system.trace_context
    if sum(len(k) + len(v) + 2 for k, v in props.items()) > MAX_PROPERTIES_BYTES:
        raise RpcFailure(pb.MESSAGE_PROPERTIES_TOO_LARGE, "message properties are too large")
    born = to_millis(system.born_timestamp) if system.HasField("born_timestamp") else 0
    return OutgoingMessage(topic, system.queue_id, message.body, props, born, kind,
                           system.message_id)


def message_type_of(props: dict[str, str]) -> int:
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if any(p in props for p in TIMER_PROPERTIES) or props.get(PROPERTY_DELAY, "0") not in ("", "0"):
        return pb.DELAY
    return pb.NORMAL


@dataclass(frozen=True)
class Delivered:
    """A stored record as one delivery to a 5.x consumer."""

    topic: str
    queue_id: int
    offset: int
    body: bytes
    properties: dict[str, str]
    meta: MessageMeta
    born_timestamp: int
    delivery_count: int
    receipt_handle: str
    invisible_ms: int
    fallback_message_id: str


def to_grpc(d: Delivered, namespace: str = "") -> pb.Message:
    props = d.properties
    system = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_KEY) or d.fallback_message_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(d.body):08X}"),
        body_encoding=pb.IDENTITY,
        message_type=message_type_of(props),  # type: ignore[arg-type]
        born_timestamp=timestamp(d.born_timestamp),
        born_host=d.meta.born_host[0],
        store_timestamp=timestamp(d.meta.store_timestamp or d.born_timestamp),
        queue_id=d.queue_id,
        queue_offset=d.offset,
        delivery_attempt=d.delivery_count,
        receipt_handle=d.receipt_handle,
        invisible_duration=duration_pb2.Duration(seconds=d.invisible_ms // 1000,
                                                 nanos=(d.invisible_ms % 1000) * 1_000_000),
    )
    if PROPERTY_TAGS in props:
        system.tag = props[PROPERTY_TAGS]
    if props.get(PROPERTY_KEYS):
        system.keys.extend(k for k in props[PROPERTY_KEYS].split(" ") if k)
    if PROPERTY_SHARDING_KEY in props:
        system.message_group = props[PROPERTY_SHARDING_KEY]
    if PROPERTY_TRACE_CONTEXT in props:
        system.trace_context = props[PROPERTY_TRACE_CONTEXT]
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(resource_namespace=namespace, name=d.topic),
                      user_properties=user, system_properties=system, body=d.body)


def receipt_handle(partition: int, offset: int, delivery_count: int, nonce: int) -> str:
    return f"{partition}.{offset}.{delivery_count}.{nonce}"


@dataclass(frozen=True)
class Receipt:
    partition: int
    offset: int
    delivery_count: int


def parse_receipt_handle(handle: str) -> Receipt:
    parts = handle.split(".")
    try:
        if len(parts) != 4:
            raise ValueError(handle)
        partition, offset, count, _nonce = (int(p) for p in parts)
    except ValueError:
        raise RpcFailure(pb.INVALID_RECEIPT_HANDLE, "invalid receipt handle") from None
    if partition < 0 or offset < 0 or count < 1:
        raise RpcFailure(pb.INVALID_RECEIPT_HANDLE, "invalid receipt handle")
    return Receipt(partition, offset, count)


@dataclass(frozen=True)
class RecallHandle:
    broker_name: str
    offset: int  # in the broker's timer queue
    message_id: str


def recall_handle(broker_name: str, offset: int, message_id: str) -> str:
    text = f"1 {broker_name} {offset} {message_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def parse_recall_handle(handle: str) -> RecallHandle:
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
        version, broker, offset, message_id = raw.split(" ")
        if version != "1" or not broker or not message_id or int(offset) < 0:
            raise ValueError(raw)
        return RecallHandle(broker, int(offset), message_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise RpcFailure(pb.BAD_REQUEST, "invalid recall handle") from None
