"""Cluster-mode admin answers per bundle broker (gateway/rocketmq/bundle_admin.py): subscription
groups from the shared metadata store (200/201/207, and enforced on pulls), consume stats (208),
who-consumes (300), offset resets (222) and runtime info (28) from the queues and offsets of the
bundle the request arrived on.  In-process, with the stand-in ownership of
test_rocketmq_bundle_brokers.py (bundles 0 and 1 of 4 owned here)."""

from __future__ import annotations

import json

from gateway.rocketmq.bundle_admin import ClusterBacklogOffsets
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.fastjson import MessageQueue, loads
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext
from tests.rocketmq.test_rocketmq_bundle_brokers import Side, side  # noqa: F401  (fixture)

TOPIC = "stats_t"  # 8 partitions: 2 queues in each of the 4 bundles


async def _send(client: RawClient, queue_id: int, count: int) -> None:
    for i in range(count):
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext(TOPIC, {}, queue_id=queue_id),
                              b"m%d" % i)
        assert r.code == ResponseCode.SUCCESS, r.remark


async def _commit(client: RawClient, group: str, queue_id: int, offset: int) -> None:
    r = await client.call(RC.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset})
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_subscription_groups_are_shared_and_enforced_on_every_port(
        side: Side) -> None:  # noqa: F811
    await side.topics.create_topic(TOPIC, 8)
    b0, b1 = await RawClient.connect(side.addr(0)), await RawClient.connect(side.addr(1))
    r = await b0.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(
        {"groupName": "cl_g", "consumeEnable": False, "retryMaxTimes": 4}).encode())
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await b1.call(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert r.code == ResponseCode.SUCCESS, r.remark
    config = loads(r.body)["subscriptionGroupTable"]["cl_g"]
    assert (config["consumeEnable"], config["retryMaxTimes"]) == (False, 4)
    await _send(b1, 0, 1)
    r = await b1.call(RC.PULL_MESSAGE, pull_ext(TOPIC, 0, 0, group="cl_g"))
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION,
                                  "subscription group no permission, cl_g")
    r = await b1.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "cl_g", "removeOffset": False})
    assert r.code == ResponseCode.SUCCESS
    r = await b0.call(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert "cl_g" not in loads(r.body)["subscriptionGroupTable"]
    r = await b1.call(RC.PULL_MESSAGE, pull_ext(TOPIC, 0, 0, group="cl_g"))
    assert r.code == ResponseCode.SUCCESS
    await b0.aclose()
    await b1.aclose()


async def test_consume_stats_who_consumes_and_reset_are_per_bundle(
        side: Side) -> None:  # noqa: F811
    await side.topics.create_topic(TOPIC, 8)
    b0, b1 = await RawClient.connect(side.addr(0)), await RawClient.connect(side.addr(1))
    await _send(b1, 0, 3)
    await _send(b1, 1, 2)
    await _send(b0, 0, 4)
    await _commit(b1, "cs_g", 0, 2)
    await _commit(b0, "other_g", 1, 0)

    r = await b1.call(RC.GET_CONSUME_STATS, {"consumerGroup": "cs_g"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = loads(r.body)["offsetTable"]
    assert set(table) == {MessageQueue(TOPIC, "C-b1", 0), MessageQueue(TOPIC, "C-b1", 1)}
    q0, q1 = table[MessageQueue(TOPIC, "C-b1", 0)], table[MessageQueue(TOPIC, "C-b1", 1)]
    assert (q0["brokerOffset"], q0["consumerOffset"]) == (3, 2)
    assert (q1["brokerOffset"], q1["consumerOffset"]) == (2, 0)
    assert q0["lastTimestamp"] > 0
    r = await b0.call(RC.GET_CONSUME_STATS, {"consumerGroup": "cs_g"})
    assert loads(r.body)["offsetTable"] == {}  # it committed nothing in bundle 0

    r = await b1.call(RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
    assert loads(r.body) == {"groupList": ["cs_g"]}
    r = await b0.call(RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
    assert loads(r.body) == {"groupList": ["other_g"]}

    hb = {"clientID": "R", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cs_g", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 0}]}]}
    r = await b1.call(RC.HEART_BEAT, body=json.dumps(hb).encode())
    assert r.code == ResponseCode.SUCCESS
    r = await b1.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, {
        "topic": TOPIC, "group": "cs_g", "timestamp": -1, "isForce": True})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert loads(r.body)["offsetTable"] == {MessageQueue(TOPIC, "C-b1", 0): 3,
                                            MessageQueue(TOPIC, "C-b1", 1): 2}
    r = await b1.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cs_g", "topic": TOPIC,
                                                 "queueId": 1})
    assert r.ext_fields["offset"] == "2"

    # removeOffset drops the group's offsets of this bundle
    r = await b1.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "cs_g", "removeOffset": True})
    assert r.code == ResponseCode.SUCCESS
    r = await b1.call(RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
    assert loads(r.body)["groupList"] == ["cs_g"]  # still online, no offsets left
    offsets = side.rocketmq.offset_ledgers.store(1)
    assert offsets is not None and offsets.committed("cs_g") == {}
    await b0.aclose()
    await b1.aclose()


async def test_runtime_info_counts_the_bundles_own_messages(side: Side) -> None:  # noqa: F811
    await side.topics.create_topic(TOPIC, 8)
    b0, b1 = await RawClient.connect(side.addr(0)), await RawClient.connect(side.addr(1))
    await _send(b1, 0, 3)
    await _send(b1, 1, 2)
    await _send(b0, 1, 1)
    await _commit(b1, "rt_g", 0, 3)
    r = await b1.call(RC.GET_BROKER_RUNTIME_INFO)
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = loads(r.body)["table"]
    assert (table["msgPutTotalTodayNow"], table["msgGetTotalTodayNow"]) == ("5", "3")
    assert table["brokerVersionDesc"] and "bootTimestamp" in table
    r = await b0.call(RC.GET_BROKER_RUNTIME_INFO)
    table = loads(r.body)["table"]
    assert (table["msgPutTotalTodayNow"], table["msgGetTotalTodayNow"]) == ("1", "0")
    await b0.aclose()
    await b1.aclose()


async def test_backlog_source_reads_and_advances_the_owning_bundles_offsets(
        side: Side) -> None:  # noqa: F811
    await side.topics.create_topic(TOPIC, 8)
    b1 = await RawClient.connect(side.addr(1))
    await _send(b1, 1, 4)
    await _commit(b1, "bl_g", 1, 1)
    partition = side.rocketmq.queue_map.partition_of(TOPIC, 8, 1, 1)
    assert partition is not None
    source = ClusterBacklogOffsets(side.rocketmq)
    assert source.committed_on(TOPIC, partition) == {"bl_g": 1}
    elsewhere = side.rocketmq.queue_map.partition_of(TOPIC, 8, 2, 0)
    assert elsewhere is not None and source.committed_on(TOPIC, elsewhere) == {}
    await source.advance("bl_g", TOPIC, partition, 3)
    await source.advance("bl_g", TOPIC, partition, 2)  # never backwards
    r = await b1.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "bl_g", "topic": TOPIC,
                                                 "queueId": 1})
    assert r.ext_fields["offset"] == "3"
    await b1.aclose()
