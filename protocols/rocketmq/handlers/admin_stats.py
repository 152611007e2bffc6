"""Statistics and connection answers for mqadmin and the RocketMQ console:
GET_TOPIC_STATS_INFO (202, topicStatus), GET_CONSUME_STATS (208, consumerProgress),
GET_CONSUMER_CONNECTION_LIST (203, consumerConnection), GET_PRODUCER_CONNECTION_LIST (204,
producerConnection), QUERY_TOPIC_CONSUME_BY_WHO (300, topicList -c), GET_BROKER_RUNTIME_INFO
(28, brokerStatus / clusterList), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305, the console's topic
page), and the HEART_BEAT wrapper that records each connection's
language, version and consumer data for them.

Bodies are written as fastjson writes them (protocols/rocketmq/fastjson.py): TopicStatsTable and
ConsumeStats are maps keyed by MessageQueue objects.  Queue offsets are partition offsets (one
offset space with Kafka); "store time" is the stored message's store timestamp.

This module must never change a partition, an offset or a client's membership (the heartbeat
wrapper only records what it saw, then hands the request to handlers/clients.py).
"""

from __future__ import annotations

from collections.abc import Callable

from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import ResponseCode, TopicNotExistError
from protocols.rocketmq.fastjson import MessageQueue, dumps_bytes
from protocols.rocketmq.handlers import clients
from protocols.rocketmq.handlers.admin_support import (
    broker_stats,
    client_details,
    committed_offsets,
    connection_bean,
    groups_with_offsets,
    queue_count,
    store_timestamp,
    subscription_bean,
)
from protocols.rocketmq.handlers.common import find_topic, get_queue, parse_json_body
from protocols.rocketmq.headers import ext_required
from protocols.rocketmq.topic_names import to_storage

BROKER_VERSION = 395  # MQVersion.Version.V4_9_4.ordinal()
BROKER_VERSION_DESC = "V4_9_4"
# Java's TopicValidator system topic set (the console marks these %SYS%)
SYSTEM_TOPICS = ("TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                 "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT")


def _ok(request: RemotingCommand, body: object) -> RemotingCommand:
    return make_response(request, ResponseCode.SUCCESS, None, None, dumps_bytes(body))


async def handle_heartbeat_recording_client(broker: BrokerLike, conn: ConnectionLike,
                                            request: RemotingCommand) -> RemotingCommand:
    """HEART_BEAT (34): remember the client's language/version/consumer data, then register."""
    response = await clients.handle_heartbeat(broker, conn, request)
    if response.code == ResponseCode.SUCCESS:
        client_details(broker).record_heartbeat(conn, request.language, request.version,
                                                parse_json_body(request.body))
    return response


async def handle_get_topic_stats_info(broker: BrokerLike, conn: ConnectionLike,
                                      request: RemotingCommand) -> RemotingCommand:
    topic = ext_required(request.ext_fields, "topic")
    try:
        info = await find_topic(broker, topic)
    except TopicNotExistError as exc:
        raise TopicNotExistError(f"topic[{topic}] not exist") from exc
    table: dict[MessageQueue, dict[str, int]] = {}
    for queue_id in range(queue_count(info)):
        plog = await get_queue(broker, topic, queue_id)
        low, high = max(plog.log_start_offset, 0), max(plog.high_watermark, 0)
        last = await store_timestamp(broker, info.name, queue_id, plog, high - 1) if high else 0
        table[MessageQueue(topic, broker.config.broker_name, queue_id)] = {
            "lastUpdateTimestamp": last, "maxOffset": high, "minOffset": low}
    return _ok(request, {"offsetTable": table})


def _has_subscriptions(broker: BrokerLike, group: str) -> bool:
    members = broker.clients.consumer_groups.get(group, {})
    return any(m.subscriptions for m in members.values())


async def handle_get_consume_stats(broker: BrokerLike, conn: ConnectionLike,
                                   request: RemotingCommand,
                                   visible: Callable[[str], bool]) -> RemotingCommand:
    """Without a topic: every topic the group committed offsets for that the requester may
    see (`visible`: the ACL's DESCRIBE on it; the named topic was checked before)."""
    group = ext_required(request.ext_fields, "consumerGroup")
    asked = request.ext_fields.get("topic") or ""
    committed = committed_offsets(broker, group)
    topics = [asked] if asked else sorted({t for t, _ in committed if visible(t)})
    table: dict[MessageQueue, dict[str, int]] = {}
    for topic in topics:
        try:
            info = await find_topic(broker, topic)
        except TopicNotExistError:
            continue  # like Java: a topic without config is left out
        if broker.clients.subscription(group, topic) is None and _has_subscriptions(broker,
                                                                                     group):
            continue  # the live group does not subscribe to it
        for queue_id in range(queue_count(info)):
            plog = await get_queue(broker, topic, queue_id)
            consumer = broker.offsets.query(group, topic, queue_id)
            consumer = max(consumer, 0) if consumer is not None else 0
            last = (await store_timestamp(broker, info.name, queue_id, plog, consumer - 1)
                    if consumer > 0 else 0)
            table[MessageQueue(topic, broker.config.broker_name, queue_id)] = {
                "brokerOffset": max(plog.high_watermark, 0), "consumerOffset": consumer,
                "lastTimestamp": last}
    stats = broker_stats(broker)
    tps = (stats.group_tps(group, broker.now_ms() / 1000, sum(committed.values()))
           if stats is not None else 0.0)
    return _ok(request, {"consumeTps": float(tps), "offsetTable": table})


async def handle_get_consumer_connection_list(broker: BrokerLike, conn: ConnectionLike,
                                              request: RemotingCommand) -> RemotingCommand:
    group = ext_required(request.ext_fields, "consumerGroup")
    members = broker.clients.consumer_groups.get(group)
    if not members:
        return make_response(request, ResponseCode.CONSUMER_NOT_ONLINE,
                             f"the consumer group[{group}] not online")
    details = client_details(broker)
    connections = [connection_bean(cid, m.connection, details)
                   for cid, m in sorted(members.items())]
    consume_type, model, where = "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET"
    raw_subs: dict[str, dict[str, object]] = {}
    for member in members.values():
        data = details.of(member.connection).consumer_groups.get(group)
        if data is not None:
            consume_type, model, where = (data.consume_type, data.message_model,
                                          data.consume_from_where)
            for sub in data.subscriptions:
                raw_subs.setdefault(str(sub.get("topic") or ""), sub)
    subscriptions: dict[str, dict[str, object]] = {}
    for member in members.values():
        for topic, parsed in member.subscriptions.items():
            subscriptions.setdefault(topic, subscription_bean(topic, raw_subs.get(topic),
                                                              parsed))
    body = {"connectionSet": connections, "consumeFromWhere": where, "consumeType": consume_type,
            "messageModel": model, "subscriptionTable": subscriptions}
    return _ok(request, body)


async def handle_get_producer_connection_list(broker: BrokerLike, conn: ConnectionLike,
                                              request: RemotingCommand) -> RemotingCommand:
    group = ext_required(request.ext_fields, "producerGroup")
    members = broker.clients.producer_groups.get(group)
    if not members:
        return make_response(request, ResponseCode.SYSTEM_ERROR,
                             f"the producer group[{group}] not exist")
    details = client_details(broker)
    return _ok(request, {"connectionSet": [connection_bean(cid, m.connection, details)
                                           for cid, m in sorted(members.items())]})


async def handle_query_topic_consume_by_who(broker: BrokerLike, conn: ConnectionLike,
                                            request: RemotingCommand) -> RemotingCommand:
    topic = ext_required(request.ext_fields, "topic")
    to_storage(topic)  # refuses illegal names like Java's header validation
    groups = {g for g, members in broker.clients.consumer_groups.items()
              if any(topic in m.subscriptions for m in members.values())}
    groups |= {g for g in groups_with_offsets(broker)
               if any(t == topic for t, _ in committed_offsets(broker, g))}
    return _ok(request, {"groupList": sorted(groups)})


async def handle_get_system_topic_list_from_broker(
        broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand) -> RemotingCommand:
    return _ok(request, {"topicList": sorted(SYSTEM_TOPICS)})


async def handle_get_broker_runtime_info(broker: BrokerLike, conn: ConnectionLike,
                                         request: RemotingCommand) -> RemotingCommand:
    """KVTable with the keys mqadmin brokerStatus / clusterList read (see broker_stats.py for
    how the put/get totals and rates are derived)."""
    table = {
        "brokerVersionDesc": BROKER_VERSION_DESC,
        "brokerVersion": str(BROKER_VERSION),
        "topicCount": str(len(broker.topics.topics())),
        "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueCapacity": "0",
        "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "0",
        "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "0",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "pageCacheLockTimeMills": "0",
        "dispatchBehindBytes": "0",
    }
    stats = broker_stats(broker)
    totals = getattr(broker, "message_totals", None)
    if stats is not None and callable(totals):
        puts, gets = totals()
        stats.record(broker.now_ms() / 1000, puts, gets)
    if stats is not None:
        table.update(stats.table())
    boot_ms = getattr(broker, "boot_timestamp_ms", None)
    if isinstance(boot_ms, int):
        table["bootTimestamp"] = str(boot_ms)
        table["runtime"] = _runtime(broker.now_ms() - boot_ms)
    return _ok(request, {"table": table})


def _runtime(ms: int) -> str:
    """Java's StoreStatsService.getFormatRuntime: "[ d days, h hours, m minutes, s seconds ]"."""
    seconds = max(ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"
