"""Client bookkeeping: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (41/42), CHECK_CLIENT_CONFIG (46).

Heartbeat bodies name enums either by name (Java: "CONSUME_PASSIVELY") or by number (C++);
both are kept as given.  Membership changes are reported to the group's other members with
NOTIFY_CONSUMER_IDS_CHANGED (40) by the broker (broker.notify_consumers_changed).

This module must never touch partitions.
"""

from __future__ import annotations

import trio

from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.client_registry import MessageQueueKey
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import MessageIllegalError, ResponseCode
from protocols.rocketmq.handlers.common import json_body, parse_json_body
from protocols.rocketmq.headers import ext_required
from protocols.rocketmq.topic_names import retry_topic, to_storage


def _notify(broker: BrokerLike, groups: set[str]) -> None:
    notify = getattr(broker, "notify_consumers_changed", None)
    if notify is not None:
        for group in groups:
            notify(group)


async def handle_heartbeat(broker: BrokerLike, conn: ConnectionLike,
                           request: RemotingCommand) -> RemotingCommand:
    data = parse_json_body(request.body)
    if not isinstance(data, dict):
        raise MessageIllegalError("heartbeat body is not an object")
    changed = broker.clients.heartbeat(conn, data, trio.current_time())
    for consumer in data.get("consumerDataSet") or []:
        group = str(consumer.get("groupName") or "") if isinstance(consumer, dict) else ""
        if group:
            # like Java: the group's retry topic exists once a consumer of it is alive
            await broker.ensure_topic(to_storage(retry_topic(group)), 1)
    _notify(broker, changed)
    return make_response(request, ResponseCode.SUCCESS)


async def handle_unregister_client(broker: BrokerLike, conn: ConnectionLike,
                                   request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    changed = broker.clients.unregister(ext_required(ext, "clientID"), ext.get("producerGroup"),
                                        ext.get("consumerGroup"))
    _notify(broker, changed)
    return make_response(request, ResponseCode.SUCCESS)


async def handle_get_consumer_list(broker: BrokerLike, conn: ConnectionLike,
                                   request: RemotingCommand) -> RemotingCommand:
    group = ext_required(request.ext_fields, "consumerGroup")
    ids = broker.clients.consumer_ids(group)
    if not ids:
        return make_response(request, ResponseCode.SYSTEM_ERROR,
                             f"no consumer for this group, {group}")
    return make_response(request, ResponseCode.SUCCESS, None, None,
                         json_body({"consumerIdList": ids}))


def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueueKey], list[dict]]:
    data = parse_json_body(request.body)
    if not isinstance(data, dict):
        raise MessageIllegalError("lock body is not an object")
    raw = data.get("mqSet") or []
    if not isinstance(raw, list):
        raise MessageIllegalError("mqSet is not a list")
    queues: list[MessageQueueKey] = []
    for mq in raw:
        if not isinstance(mq, dict):
            raise MessageIllegalError("a message queue is not an object")
        try:
            queues.append((str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise MessageIllegalError(f"bad message queue {mq!r}") from exc
    return str(data.get("consumerGroup") or ""), str(data.get("clientId") or ""), queues, raw


async def handle_lock_batch(broker: BrokerLike, conn: ConnectionLike,
                            request: RemotingCommand) -> RemotingCommand:
    group, client_id, queues, _ = _lock_body(request)
    locked = broker.clients.lock_batch(group, client_id, queues, trio.current_time())
    body = {"lockOKMQSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in locked]}
    return make_response(request, ResponseCode.SUCCESS, None, None, json_body(body))


async def handle_unlock_batch(broker: BrokerLike, conn: ConnectionLike,
                              request: RemotingCommand) -> RemotingCommand:
    group, client_id, queues, _ = _lock_body(request)
    broker.clients.unlock_batch(group, client_id, queues)
    return make_response(request, ResponseCode.SUCCESS)


async def handle_check_client_config(broker: BrokerLike, conn: ConnectionLike,
                                     request: RemotingCommand) -> RemotingCommand:
    return make_response(request, ResponseCode.SUCCESS)
