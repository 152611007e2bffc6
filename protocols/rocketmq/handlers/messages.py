"""Messages by id or key, and consumer retries: VIEW_MESSAGE_BY_ID (33), QUERY_MESSAGE (12),
CONSUMER_SEND_MSG_BACK (36).

A commit-log offset (message_id.py) names topic hash, queue and queue offset, so a message is
found by reading that one offset.  QUERY_MESSAGE (queryMessage by key; viewMessage and
queryMessageByUniqKey by a client message id, flagged `_UNIQUE_KEY_QUERY`) looks the key up in
each queue's key index (message_index.py: KEYS words and UNIQ_KEY), then reads just the hits.
A message sent back by a consumer goes to %RETRY%<group> with delay level 3 + reconsume times
(or the level the consumer asked for), and to %DLQ%<group> once it was reconsumed max times
(the group's retryMaxTimes with the client's maxReconsumeTimes, see `max_reconsume_times`);
a group whose stored retryQueueNums is 0 has no retry queue, so its send-backs are dropped
(Java answers SUCCESS too).

This module must never change an existing message.
"""

from __future__ import annotations

import time
from typing import Any

from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import Record
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import QueryNotFoundError, ResponseCode
from protocols.rocketmq.handlers.common import (
    StorageError,
    find_topic,
    get_queue,
    records_of,
    stored_message,
)
from protocols.rocketmq.handlers.send import append_records
from protocols.rocketmq.handlers.subscription_groups import stored_config
from protocols.rocketmq.headers import ext_int, ext_required
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    MessageMeta,
    encode_stored_message,
    from_record,
    to_record,
)
from protocols.rocketmq.message_id import (
    commit_log_offset,
    decode_commit_log_offset,
    offset_message_id,
    topic_hash,
)
from protocols.rocketmq.message_index import find_offsets
from protocols.rocketmq.topic_names import dlq_topic, from_storage, retry_topic, to_storage

CLIENT_SENDS_MAX_RECONSUME_TIMES = 121  # MQVersion.Version.V3_4_9.ordinal()


async def read_one(broker: BrokerLike, topic: str, queue_id: int, offset: int) -> Record:
    plog = await get_queue(broker, topic, queue_id)
    if not plog.log_start_offset <= offset < plog.high_watermark:
        raise QueryNotFoundError(f"no message at {topic}-{queue_id}@{offset}")
    try:
        records = records_of(await plog.read(offset, 1), offset)
    except KafkaProtocolError as exc:
        raise StorageError(str(exc)) from exc
    if not records or records[0].offset != offset:
        raise QueryNotFoundError(f"no message at {topic}-{queue_id}@{offset}")
    return records[0]


async def find_by_commit_offset(broker: BrokerLike, commit_offset: int
                                ) -> tuple[str, int, Record]:
    """(RocketMQ topic, queue id, record) of a derived commit-log offset."""
    where = decode_commit_log_offset(commit_offset)
    for name, info in broker.topics.topics().items():
        topic = from_storage(name)
        if topic_hash(topic) != where.topic_hash or where.queue_id >= info.partitions:
            continue
        try:
            return topic, where.queue_id, await read_one(broker, topic, where.queue_id,
                                                         where.queue_offset)
        except QueryNotFoundError:
            continue
    raise QueryNotFoundError(f"no message with commit-log offset {commit_offset}")


async def handle_view_message_by_id(broker: BrokerLike, conn: ConnectionLike,
                                    request: RemotingCommand) -> RemotingCommand:
    offset = ext_int(request.ext_fields, "offset")
    topic, queue_id, record = await find_by_commit_offset(broker, offset)
    body = encode_stored_message(stored_message(broker, to_storage(topic), queue_id, record))
    return make_response(request, ResponseCode.SUCCESS, None, None, body)


async def handle_query_message(broker: BrokerLike, conn: ConnectionLike,
                               request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    topic, key = ext_required(ext, "topic"), ext_required(ext, "key")
    max_num = max(1, min(ext_int(ext, "maxNum", 32), 64))
    begin, end = ext_int(ext, "beginTimestamp", 0), ext_int(ext, "endTimestamp", 2**62)
    unique = ext.get("_UNIQUE_KEY_QUERY") == "true"  # a client message id (UNIQ_KEY)
    info = await find_topic(broker, topic)
    found: list[bytes] = []
    for queue_id in range(info.partitions):
        plog = await get_queue(broker, topic, queue_id)
        try:
            offsets = await find_offsets(plog, key, begin, end, records_of)
            for offset in offsets[:max_num - len(found)]:
                record = await read_one(broker, topic, queue_id, offset)
                _, props, _ = from_record(record)
                if unique and props.get(PROPERTY_UNIQ_KEY) != key:
                    continue  # a KEYS word equal to the id is not the message it names
                found.append(encode_stored_message(
                    stored_message(broker, to_storage(topic), queue_id, record)))
        except KafkaProtocolError as exc:
            raise StorageError(str(exc)) from exc
        except QueryNotFoundError:
            continue  # trimmed by retention since it was indexed
        if len(found) >= max_num:
            break
    if not found:
        raise QueryNotFoundError(f"can not find message, maybe time range not correct: {key}")
    now = int(time.time() * 1000)
    return make_response(request, ResponseCode.SUCCESS, None,
                         {"indexLastUpdateTimestamp": now, "indexLastUpdatePhyoffset": 0},
                         b"".join(found[:max_num]))


def max_reconsume_times(broker: BrokerLike, request: RemotingCommand,
                        stored: dict[str, Any] | None) -> int:
    """Reconsumes before the DLQ.  Java takes the group's retryMaxTimes, replaced by the
    client's maxReconsumeTimes when a client of V3_4_9 or later sends one.  Here the group's
    limit -- its stored retryMaxTimes, else the broker's max_reconsume_times -- also caps what
    the client asks for (Java clients always send 16 unless configured, which would make the
    admin's retryMaxTimes a dead letter)."""
    limit = stored["retryMaxTimes"] if stored is not None else broker.config.max_reconsume_times
    asked = ext_int(request.ext_fields, "maxReconsumeTimes", -1)
    if request.version < CLIENT_SENDS_MAX_RECONSUME_TIMES or asked < 0:
        return int(limit)
    return min(asked, int(limit))


async def handle_consumer_send_msg_back(broker: BrokerLike, conn: ConnectionLike,
                                        request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    group = ext_required(ext, "group")
    delay_level = ext_int(ext, "delayLevel", 0)
    stored = stored_config(broker, group)
    if stored is not None and stored["retryQueueNums"] <= 0:
        return make_response(request, ResponseCode.SUCCESS)  # Java: no retry queue, dropped
    max_times = max_reconsume_times(broker, request, stored)
    topic, _queue_id, record = await find_by_commit_offset(broker, ext_int(ext, "offset"))
    body, props, meta = from_record(record)
    reconsume = meta.reconsume_times
    props.setdefault(PROPERTY_RETRY_TOPIC, topic)
    origin = ext.get("originMsgId") or offset_message_id(
        broker.config.advertised_host, broker.config.advertised_port,
        commit_log_offset(topic, _queue_id, record.offset))
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin)
    props.pop(PROPERTY_DELAY, None)
    if reconsume >= max_times or delay_level < 0:
        target = dlq_topic(group)
        level = 0
    else:
        target = retry_topic(group)
        level = delay_level if delay_level > 0 else 3 + reconsume
    await broker.ensure_topic(to_storage(target), 1)
    now = int(time.time() * 1000)
    new_meta = MessageMeta(flag=meta.flag, sys_flag=meta.sys_flag, born_host=meta.born_host,
                           store_timestamp=now, reconsume_times=reconsume + 1)
    delays = getattr(broker, "delays", None)
    if level > 0 and delays is not None:
        await delays.schedule(target, 0, body, props, new_meta, record.timestamp, level)
    else:
        await append_records(broker, target, 0, [to_record(body, props, new_meta,
                                                           record.timestamp)])
    return make_response(request, ResponseCode.SUCCESS)
