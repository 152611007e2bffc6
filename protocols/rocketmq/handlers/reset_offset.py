"""INVOKE_BROKER_TO_RESET_OFFSET (222, mqadmin resetOffsetByTime): move a consumer group's
offsets on one topic to the first message stored at or after a timestamp, and tell the
group's online clients with RESET_CONSUMER_CLIENT_OFFSET (220, oneway) as Java's broker does.

Per queue (Java's Broker2Client.resetOffset): the target is the queue end for timestamp -1,
else the offset found by time (the queue end when every message is older); it replaces the
committed offset when `isForce` or when it is lower.  A group with no committed offset on the
topic is refused (SYSTEM_ERROR); a group with no online consumer gets CONSUMER_NOT_ONLINE (206),
on which mqadmin falls back to its "old" method (GET_CONSUME_STATS + SEARCH_OFFSET_BY_TIMESTAMP +
UPDATE_CONSUMER_OFFSET).

Unlike Java, the broker also commits the new offsets itself, durably, before notifying: a
client that rebalances reads its start offset from the broker, and a client that misses the
oneway notification still starts there next time.  The notification body is written per
client: Java clients parse ResetOffsetBody (fastjson, MessageQueue keys), C++ clients (language
CPP in their heartbeats) ResetOffsetBodyForC (a list) because jsoncpp cannot read object keys.
The answer is ResetOffsetBody, which mqadmin prints.

This module must never answer before the new offsets are durable.
"""

from __future__ import annotations

from protocols.kafka.errors import KafkaProtocolError
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_request, make_response
from protocols.rocketmq.errors import ResponseCode, SystemError_
from protocols.rocketmq.fastjson import MessageQueue, dumps_bytes
from protocols.rocketmq.handlers.admin_support import (
    client_details,
    committed_offsets,
    queue_count,
)
from protocols.rocketmq.handlers.common import StorageError, find_topic, get_queue
from protocols.rocketmq.headers import ext_bool, ext_int, ext_required
from protocols.rocketmq.request_codes import RequestCode


def reset_body(offsets: dict[MessageQueue, int]) -> bytes:
    return dumps_bytes({"offsetTable": offsets})


def reset_body_for_c(offsets: dict[MessageQueue, int]) -> bytes:
    return dumps_bytes({"offsetTable": [
        {"brokerName": mq.broker_name, "offset": offset, "queueId": mq.queue_id,
         "topic": mq.topic} for mq, offset in offsets.items()]})


async def target_offsets(broker: BrokerLike, topic: str, group: str, timestamp: int,
                         force: bool) -> dict[MessageQueue, int]:
    info = await find_topic(broker, topic)
    known = committed_offsets(broker, group)
    has_any = any(t == topic for t, _ in known) or any(
        broker.offsets.query(group, topic, q) is not None for q in range(queue_count(info)))
    if not has_any:
        raise SystemError_(f"THe consumer group <{group}> not exist")
    result: dict[MessageQueue, int] = {}
    for queue_id in range(queue_count(info)):
        plog = await get_queue(broker, topic, queue_id)
        current = broker.offsets.query(group, topic, queue_id)
        if timestamp == -1:
            target = plog.high_watermark
        else:
            try:
                found = await plog.offset_for_timestamp(timestamp)
            except KafkaProtocolError as exc:
                raise StorageError(str(exc)) from exc
            target = found[0] if found is not None else plog.high_watermark
        target = max(target, plog.log_start_offset, 0)
        if current is None or force or target < current:
            result[MessageQueue(topic, broker.config.broker_name, queue_id)] = target
        else:
            result[MessageQueue(topic, broker.config.broker_name, queue_id)] = current
    return result


async def handle_invoke_broker_to_reset_offset(broker: BrokerLike, conn: ConnectionLike,
                                               request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    topic, group = ext_required(ext, "topic"), ext_required(ext, "group")
    timestamp = ext_int(ext, "timestamp")
    force = ext_bool(ext, "isForce")
    offsets = await target_offsets(broker, topic, group, timestamp, force)
    members = broker.clients.consumer_groups.get(group, {})
    if not members:
        return make_response(
            request, ResponseCode.CONSUMER_NOT_ONLINE,
            f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
            f"Timestamp: {timestamp}")
    for mq, offset in offsets.items():
        await broker.offsets.commit(group, topic, mq.queue_id, offset)
    # every field, like Java's header encoding: the C++ client logs isForce as a string and
    # aborts (uncaught jsoncpp LogicError) when it is missing
    header = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": False}
    java_body, c_body = reset_body(offsets), reset_body_for_c(offsets)
    details = client_details(broker)
    for member in members.values():
        is_cpp = details.of(member.connection).is_cpp
        member.connection.send_request(make_request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, c_body if is_cpp else java_body,
            oneway=True))
    return make_response(request, ResponseCode.SUCCESS, None, None, java_body)
