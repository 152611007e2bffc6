"""Helpers the broker handlers share: topic/queue lookup, reading records, building responses,
and the filtered queue scan of both pull paths (4.x PULL_MESSAGE and RocketMQ 5 PullMessage).

This module must never write to a partition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from protocols.kafka.errors import (
    KafkaProtocolError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.record_batch import Record, decode_records, parse_header
from protocols.rocketmq.broker_api import BrokerLike, PartitionLogLike, TopicInfoLike
from protocols.rocketmq.errors import MessageIllegalError, RocketMQError, TopicNotExistError
from protocols.rocketmq.message_encoding import StoredMessage, from_record
from protocols.rocketmq.message_id import MAX_QUEUES, commit_log_offset
from protocols.rocketmq.topic_names import from_storage, to_storage

T = TypeVar("T")


class StorageError(RocketMQError):
    """A failure below the protocol (answered as SYSTEM_ERROR with its text)."""


def topic_info(broker: BrokerLike, topic: str) -> TopicInfoLike | None:
    return broker.topics.topics().get(to_storage(topic))


async def find_topic(broker: BrokerLike, topic: str) -> TopicInfoLike:
    name = to_storage(topic)
    info = broker.topics.topics().get(name)
    if info is None:
        info = await broker.topics.refresh_topic(name)
    if info is None:
        raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
    return info


async def get_queue(broker: BrokerLike, topic: str, queue_id: int) -> PartitionLogLike:
    return await queue_of(broker, await find_topic(broker, topic), topic, queue_id)


async def queue_of(broker: BrokerLike, info: TopicInfoLike, topic: str,
                   queue_id: int) -> PartitionLogLike:  # fmt: skip
    """Queue `queue_id` of the topic `info` describes (`topic`: its RocketMQ name)."""
    if not 0 <= queue_id < min(info.partitions, MAX_QUEUES):
        raise MessageIllegalError(
            f"queueId[{queue_id}] is illegal, topic:[{topic}] queue nums:[{info.partitions}]")
    try:
        return await broker.topics.partition(info.name, queue_id)
    except UnknownTopicOrPartitionError as exc:
        raise TopicNotExistError(str(exc)) from exc
    except KafkaProtocolError as exc:
        raise StorageError(str(exc)) from exc


def records_of(batches: list[bytes], first_offset: int) -> list[Record]:
    """Data records at or after `first_offset` (control batches skipped)."""
    return list(iter_records(batches, first_offset))


def iter_records(batches: list[bytes], first_offset: int) -> Iterator[Record]:
    """Like records_of, decoding each batch only when the caller gets that far."""
    for batch in batches:
        if parse_header(batch).is_control:
            continue
        for record in decode_records(batch):
            if record.offset >= first_offset:
                yield record


async def scan_queue(
    plog: PartitionLogLike,
    offset: int,
    convert: Callable[[Record], tuple[T, int] | None],
    *,
    max_messages: int,
    max_records: int,
    max_bytes: int,
    read_bytes: Callable[[int, int], int],
    encode_batch: Callable[[bytes, int], list[tuple[int, tuple[T, int] | None]] | None]
    | None = None,
) -> tuple[list[T], int]:
    """The messages of a queue from `offset` on that `convert` keeps, and the offset after the
    last record looked at (a pull's next offset).

    `convert` turns a record into (message, its size) or None when the pull's filter skips it.
    The scan stops at the high watermark, at `max_messages` kept, `max_records` looked at or
    `max_bytes` kept (checked after each record, so a filter that skips most records still
    answers soon). `read_bytes(kept, kept_bytes)` is how much one partition read asks for.
    Batches of control records only are stepped over. An offset the partition no longer has
    ends the scan; other storage errors (KafkaProtocolError) are the caller's.
    `encode_batch(batch, first_offset)`, when given, converts a whole batch at once (the same
    (offset, converted) pairs `convert` would give for its records at or after first_offset),
    or gives None to have that batch's records decoded and converted one by one."""
    out: list[T] = []
    scanned = size = 0
    while (offset < plog.high_watermark and len(out) < max_messages
           and scanned < max_records and size < max_bytes):  # fmt: skip
        try:
            batches = await plog.read(offset, read_bytes(len(out), size))
        except OffsetOutOfRangeError:
            break
        if not batches:
            break
        before = offset
        full = False
        for batch in batches:
            encoded = encode_batch(batch, before) if encode_batch is not None else None
            # a list from encode_batch (never for a control batch), else decoded lazily
            for record_offset, converted in (encoded if encoded is not None
                                             else _converted(batch, before, convert)):
                scanned += 1
                offset = record_offset + 1
                if converted is None:
                    continue
                message, message_size = converted
                out.append(message)
                size += message_size
                if len(out) >= max_messages or scanned >= max_records or size >= max_bytes:
                    full = True
                    break
            if full:
                break
        if offset == before:  # only control batches: step past them
            offset = max(offset, parse_header(batches[-1]).last_offset + 1)
    return out, offset


def _converted(batch: bytes, first_offset: int,
               convert: Callable[[Record], tuple[T, int] | None],
               ) -> Iterator[tuple[int, tuple[T, int] | None]]:  # fmt: skip
    """(offset, converted) of the batch's data records at or after `first_offset`."""
    if parse_header(batch).is_control:
        return
    for record in decode_records(batch):
        if record.offset >= first_offset:
            yield record.offset, convert(record)


def stored_message(broker: BrokerLike, storage_topic: str, queue_id: int,
                   record: Record) -> StoredMessage:
    body, props, meta = from_record(record)
    cfg = broker.config
    return StoredMessage(
        topic=from_storage(storage_topic),
        queue_id=queue_id,
        queue_offset=record.offset,
        commit_log_offset=commit_log_offset(from_storage(storage_topic), queue_id, record.offset),
        body=body,
        properties=props,
        flag=meta.flag,
        sys_flag=meta.sys_flag,
        born_timestamp=record.timestamp,
        born_host=meta.born_host,
        store_timestamp=meta.store_timestamp or record.timestamp,
        store_host=(cfg.advertised_host, cfg.advertised_port),
        reconsume_times=meta.reconsume_times,
    )


def json_body(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def parse_json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MessageIllegalError(f"request body is not JSON: {exc}") from exc
