"""Consumer offsets and queue bounds: QUERY/UPDATE_CONSUMER_OFFSET (14/15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32).

A group with no stored offset gets 0 while the queue still starts at 0 (consumers rely on it to
start from the beginning of a new topic), else QUERY_NOT_FOUND (22).

This module must never change a partition.
"""

from __future__ import annotations

from protocols.kafka.errors import KafkaProtocolError
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import QueryNotFoundError, ResponseCode
from protocols.rocketmq.handlers.common import StorageError, get_queue, records_of
from protocols.rocketmq.headers import ext_int, ext_required


async def handle_query_consumer_offset(broker: BrokerLike, conn: ConnectionLike,
                                       request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    group, topic = ext_required(ext, "consumerGroup"), ext_required(ext, "topic")
    queue_id = ext_int(ext, "queueId")
    stored = broker.offsets.query(group, topic, queue_id)
    if stored is None:
        plog = await get_queue(broker, topic, queue_id)
        if plog.log_start_offset > 0:
            raise QueryNotFoundError(
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        stored = 0
    return make_response(request, ResponseCode.SUCCESS, None, {"offset": stored})


async def handle_update_consumer_offset(broker: BrokerLike, conn: ConnectionLike,
                                        request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    group, topic = ext_required(ext, "consumerGroup"), ext_required(ext, "topic")
    queue_id = ext_int(ext, "queueId")
    offset = ext_int(ext, "commitOffset")
    await get_queue(broker, topic, queue_id)  # refuses unknown topics/queues
    await broker.offsets.commit(group, topic, queue_id, offset)
    return make_response(request, ResponseCode.SUCCESS)


async def handle_get_max_offset(broker: BrokerLike, conn: ConnectionLike,
                                request: RemotingCommand) -> RemotingCommand:
    plog = await get_queue(broker, ext_required(request.ext_fields, "topic"),
                           ext_int(request.ext_fields, "queueId"))
    return make_response(request, ResponseCode.SUCCESS, None, {"offset": plog.high_watermark})


async def handle_get_min_offset(broker: BrokerLike, conn: ConnectionLike,
                                request: RemotingCommand) -> RemotingCommand:
    plog = await get_queue(broker, ext_required(request.ext_fields, "topic"),
                           ext_int(request.ext_fields, "queueId"))
    return make_response(request, ResponseCode.SUCCESS, None, {"offset": plog.log_start_offset})


async def handle_search_offset_by_timestamp(broker: BrokerLike, conn: ConnectionLike,
                                            request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    plog = await get_queue(broker, ext_required(ext, "topic"), ext_int(ext, "queueId"))
    try:
        found = await plog.offset_for_timestamp(ext_int(ext, "timestamp"))
    except KafkaProtocolError as exc:
        raise StorageError(str(exc)) from exc
    offset = found[0] if found is not None else plog.high_watermark
    return make_response(request, ResponseCode.SUCCESS, None, {"offset": offset})


async def handle_get_earliest_msg_storetime(broker: BrokerLike, conn: ConnectionLike,
                                           request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    plog = await get_queue(broker, ext_required(ext, "topic"), ext_int(ext, "queueId"))
    start = plog.log_start_offset
    if start >= plog.high_watermark:
        raise QueryNotFoundError("the queue is empty")
    try:
        records = records_of(await plog.read(start, 1 << 20), start)
    except KafkaProtocolError as exc:
        raise StorageError(str(exc)) from exc
    if not records:
        raise QueryNotFoundError("no message in the queue")
    return make_response(request, ResponseCode.SUCCESS, None,
                         {"timestamp": records[0].timestamp})
