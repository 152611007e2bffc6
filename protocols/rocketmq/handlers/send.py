"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A send becomes one Kafka v2 record batch (one record per message) appended to the partition
that is the message queue; the answer carries the queue offset and the offset message id.
Unknown topics are created on first send when the producer fell back to the default topic
route (defaultTopic set) and auto-creation is on; retry topics are always created.  Compressed
bodies (sysFlag bit 0) are inflated so Kafka readers see the plain body.  Delay levels and
transactional half messages are handed to the broker's scheduler (broker.delays / .transactions)
when it has one.

This module must never answer before the append is durable.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from protocols.kafka.built_batch import BuiltBatch, built_batch
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import Record
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike, TopicInfoLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.delay_levels import TIMER_PROPERTIES, timer_deliver_at
from protocols.rocketmq.errors import (
    MessageIllegalError,
    NoPermissionError,
    ResponseCode,
    ServiceNotAvailableError,
    SystemBusyError,
    TopicNotExistError,
)
from protocols.rocketmq.handlers.common import (
    StorageError,
    find_topic,
    get_queue,
    queue_of,
    topic_info,
)
from protocols.rocketmq.headers import SendHeader
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_TRANSACTION_MASK,
    SYS_FLAG_TRANSACTION_PREPARED,
    MessageMeta,
    decode_batch_body,
    decode_properties,
    decompress_body,
    message_batch,
    to_record,
)
from protocols.rocketmq.message_id import MAX_QUEUES, commit_log_offset, offset_message_id
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import (
    HALF_TOPIC,
    NOT_SENDABLE_TOPICS,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    to_storage,
)

_round_robin = itertools.count()
MAX_MESSAGES_PER_BATCH = 10_000
# a message without these properties (and no transaction bits) is stored as it is:
# divert_special would find nothing to do
_SPECIAL_PROPERTIES = frozenset({PROPERTY_DELAY, *TIMER_PROPERTIES})


async def resolve_queue(broker: BrokerLike, header: SendHeader) -> int:
    """The topic's queue count after auto-creation; chooses a queue when queueId < 0."""
    return (await resolve_topic_queue(broker, header))[1]


async def resolve_topic_queue(broker: BrokerLike, header: SendHeader
                              ) -> tuple[TopicInfoLike, int]:  # fmt: skip
    """resolve_queue, with the topic it found or created."""
    if header.topic in NOT_SENDABLE_TOPICS:
        raise NoPermissionError(f"Sending message to topic[{header.topic}] is forbidden.")
    try:
        info = await find_topic(broker, header.topic)
        partitions = info.partitions
    except TopicNotExistError:
        cfg = broker.config
        retry = header.topic.startswith(RETRY_PREFIX)
        if not (retry or (cfg.auto_create_topics and header.default_topic)):
            raise
        queues = 1 if retry else max(1, min(header.default_topic_queue_nums,
                                            cfg.default_queue_nums))
        info = await broker.ensure_topic(to_storage(header.topic), queues)
        partitions = info.partitions
    if header.queue_id < 0:
        return info, next(_round_robin) % partitions
    if header.queue_id >= partitions:
        raise MessageIllegalError(
            f"request queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
            f"queue nums:[{partitions}]")
    return info, header.queue_id


def _message_meta(header: SendHeader, flag: int, conn: ConnectionLike, now: int) -> MessageMeta:
    return MessageMeta(flag=flag, sys_flag=header.sys_flag & ~SYS_FLAG_COMPRESSED,
                       born_host=conn.peer, store_timestamp=now,
                       reconsume_times=header.reconsume_times)


async def append_records(broker: BrokerLike, topic: str, queue_id: int,
                         records: list[Record]) -> int:
    """Append records as one batch to (RocketMQ) topic/queue; returns the first offset."""
    return await append_batch(broker, topic, queue_id, built_batch(records))


async def append_batch(broker: BrokerLike, topic: str, queue_id: int, batch: BuiltBatch,
                       info: TopicInfoLike | None = None) -> int:
    """Append one batch built here to (RocketMQ) topic/queue (`info`: the topic, when the
    caller already looked it up); returns its first offset."""
    if info is None:
        plog = await get_queue(broker, topic, queue_id)
    else:
        plog = await queue_of(broker, info, topic, queue_id)
    try:
        result = await plog.append_built(batch)
    except KafkaProtocolError as exc:
        raise StorageError(f"append to {topic}-{queue_id} failed: {exc}") from exc
    return result.base_offset


async def divert_special(broker: BrokerLike, conn: ConnectionLike, header: SendHeader,
                         queue_id: int, message: tuple[bytes, dict[str, str], int], now: int,
                         born: int) -> dict[str, object] | None:
    """Half messages go to the transaction service, delayed ones to the scheduler; the
    response fields, or None when the message is stored normally."""
    body, props, flag = message
    meta = _message_meta(header, flag, conn, now)
    cfg = broker.config
    uniq = props.get(PROPERTY_UNIQ_KEY, "")
    transactions = getattr(broker, "transactions", None)
    if header.sys_flag & SYS_FLAG_TRANSACTION_MASK == SYS_FLAG_TRANSACTION_PREPARED:
        if transactions is None:
            raise MessageIllegalError("transactional messages are not enabled on this broker")
        offset = await transactions.prepare(header.topic, queue_id, header.producer_group, body,
                                            props, meta, born)
        clo = commit_log_offset(HALF_TOPIC, 0, offset)
        return {"msgId": offset_message_id(cfg.advertised_host, cfg.advertised_port, clo),
                "queueId": queue_id, "queueOffset": offset, "transactionId": uniq,
                "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    delays = getattr(broker, "delays", None)
    try:
        level = int(props.get(PROPERTY_DELAY, "0") or 0)
        deliver_at = timer_deliver_at(props, now)
    except ValueError as exc:
        raise MessageIllegalError(f"bad delay level or delivery time: {exc}") from exc
    if deliver_at is not None and deliver_at > now and delays is not None:
        timer_queue, offset = await delays.schedule_at(header.topic, queue_id, body, props, meta,
                                                       born, deliver_at)
        clo = commit_log_offset(SCHEDULE_TOPIC, timer_queue, offset)
        return {"msgId": offset_message_id(cfg.advertised_host, cfg.advertised_port, clo),
                "queueId": queue_id, "queueOffset": offset,
                "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    if level > 0 and delays is not None:
        schedule_queue, offset = await delays.schedule(header.topic, queue_id, body, props,
                                                       meta, born, level)
        clo = commit_log_offset(SCHEDULE_TOPIC, schedule_queue, offset)
        return {"msgId": offset_message_id(cfg.advertised_host, cfg.advertised_port, clo),
                "queueId": queue_id, "queueOffset": offset,
                "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    return None


async def admit_under_backlog_quota(broker: BrokerLike, topic: str, queue_id: int) -> None:
    """Hold or refuse a send to a queue over its backlog quota (gateway/topics/backlog_quota.py
    says why these codes: SERVICE_NOT_AVAILABLE as a store refusing writes, SYSTEM_BUSY as
    flow control)."""
    quotas = getattr(broker.topics, "backlog_quotas", None)
    if quotas is None:
        return
    refusal = await quotas.admit(to_storage(topic), queue_id)
    if refusal is not None:
        raise (SystemBusyError if refusal.held else ServiceNotAvailableError)(refusal.message)


async def handle_send(broker: BrokerLike, conn: ConnectionLike,
                      request: RemotingCommand) -> RemotingCommand:
    v2 = request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    header = SendHeader.parse(request.ext_fields, v2=v2)
    batch = request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch
    now = int(time.time() * 1000)
    born = header.born_timestamp or now
    if batch:
        items = decode_batch_body(request.body)
        if len(items) > MAX_MESSAGES_PER_BATCH:
            raise MessageIllegalError(f"batch of {len(items)} messages is too large")
        messages = [(m.body, {**m.properties}, m.flag) for m in items]
    else:
        body = request.body
        if header.sys_flag & SYS_FLAG_COMPRESSED:
            body = decompress_body(body)
        messages = [(body, decode_properties(header.properties), header.flag)]
    info, queue_id = await resolve_topic_queue(broker, header)
    await admit_under_backlog_quota(broker, header.topic, queue_id)

    if not batch and (header.sys_flag & SYS_FLAG_TRANSACTION_MASK
                      or not _SPECIAL_PROPERTIES.isdisjoint(messages[0][1])):
        diverted = await divert_special(broker, conn, header, queue_id, messages[0], now, born)
        if diverted is not None:
            return make_response(request, ResponseCode.SUCCESS, None, diverted)

    if batch:
        records = [to_record(body, props, _message_meta(header, flag, conn, now), born)
                   for body, props, flag in messages]
        base = await append_records(broker, header.topic, queue_id, records)
    else:
        body, props, flag = messages[0]
        base = await append_batch(broker, header.topic, queue_id, message_batch(
            body, props, _message_meta(header, flag, conn, now), born), info)
    if batch:
        cfg = broker.config
        msg_id = ",".join([offset_message_id(cfg.advertised_host, cfg.advertised_port,
                                             commit_log_offset(header.topic, queue_id, base + i))
                           for i in range(len(messages))])
        return _sent(request, msg_id, queue_id, base)
    return _sent_one(broker, request, header.topic, queue_id, base)


def _sent_one(broker: BrokerLike, request: RemotingCommand, topic: str, queue_id: int,
              base: int) -> RemotingCommand:  # fmt: skip
    cfg = broker.config
    return _sent(request, offset_message_id(cfg.advertised_host, cfg.advertised_port,
                                            commit_log_offset(topic, queue_id, base)),
                 queue_id, base)


def _sent(request: RemotingCommand, msg_id: str, queue_id: int, base: int) -> RemotingCommand:
    ext: dict[str, object] = {  # all strings already: make_response converts nothing
        "msgId": msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(base),
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    return make_response(request, ResponseCode.SUCCESS, None, ext)


def start_send(broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand,
               answer: Callable[[RemotingCommand | BaseException], None]) -> bool:
    """handle_send without a waiting task, for the common send: one message without delay,
    timer or transaction properties, to a topic this broker knows, a queue whose log is open
    here and not over its backlog quota, and a log that takes the append at once
    (append_built_soon).  `answer` gets the response once the message is durable, or the
    exception handle_send would raise, in the Trio thread.  False: nothing was started (and
    anything that would be refused is left to handle_send, which answers it)."""
    try:
        header = SendHeader.parse(request.ext_fields, v2=request.code != RequestCode.SEND_MESSAGE)
        if (header.batch or header.sys_flag & SYS_FLAG_TRANSACTION_MASK
                or header.topic in NOT_SENDABLE_TOPICS):  # handle_send refuses it
            return False
        props = decode_properties(header.properties)
        info = topic_info(broker, header.topic)
        if info is None or not _SPECIAL_PROPERTIES.isdisjoint(props):
            return False
        partitions = min(info.partitions, MAX_QUEUES)
        queue_id = header.queue_id if header.queue_id >= 0 else next(_round_robin) % partitions
        topics: Any = broker.topics
        quotas = getattr(topics, "backlog_quotas", None)
        open_log = getattr(topics, "open_log", None)
        if queue_id >= partitions or open_log is None or (
                quotas is not None and quotas.over_quota(info.name, queue_id)):
            return False
        plog = open_log(info.name, queue_id)
        append_soon = getattr(plog, "append_built_soon", None)
        if append_soon is None:
            return False
        body = request.body
        if header.sys_flag & SYS_FLAG_COMPRESSED:
            body = decompress_body(body)
        now = int(time.time() * 1000)
        batch = message_batch(body, props, _message_meta(header, header.flag, conn, now),
                              header.born_timestamp or now)
    except Exception:  # handle_send answers whatever is wrong with it
        return False

    def stored(result: Any) -> None:
        if isinstance(result, KafkaProtocolError):
            error = StorageError(f"append to {header.topic}-{queue_id} failed: {result}")
            error.__cause__ = result
            answer(error)
        elif isinstance(result, BaseException):
            answer(result)
        else:
            answer(_sent_one(broker, request, header.topic, queue_id, result.base_offset))

    try:
        started: bool = append_soon(batch, stored)
    except Exception:  # the topic's limits refused it before anything was stored
        return False
    return started
