"""mqadmin / console request codes on the in-process broker, over raw remoting frames:
GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_CONSUMER/PRODUCER_CONNECTION_LIST
(203/204), QUERY_TOPIC_CONSUME_BY_WHO (300), subscription groups (200/201/207),
GET_BROKER_RUNTIME_INFO (28), INVOKE_BROKER_TO_RESET_OFFSET (222, with the C++ push consumer
re-receiving), and the fastjson dialect their bodies use."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest
import trio

from gateway.rocketmq.subscription_groups import (
    SUBSCRIPTION_GROUPS_PATH,
    SubscriptionGroupStore,
    SubscriptionGroupStoreError,
)
from ledger_backend.metadata import open_store
from protocols.rocketmq.broker_stats import BrokerStats
from protocols.rocketmq.codec import RemotingCommand, encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.fastjson import MessageQueue, ObjectKey, dumps, loads
from protocols.rocketmq.message_encoding import encode_properties
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient

BROKER = "ledgerwire-broker"


# --- the fastjson dialect ---------------------------------------------------------------------

def test_fastjson_writes_object_keys_like_fastjson() -> None:
    body = {"consumeTps": 0.0, "offsetTable": {
        MessageQueue("T", "b", 0): {"brokerOffset": 10, "consumerOffset": 4, "lastTimestamp": 7},
        MessageQueue("T", "b", 1): {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}}}
    text = dumps(body)
    assert text == (
        '{"consumeTps":0.0,"offsetTable":{'
        '{"brokerName":"b","queueId":0,"topic":"T"}:'
        '{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":7},'
        '{"brokerName":"b","queueId":1,"topic":"T"}:'
        '{"brokerOffset":0,"consumerOffset":0,"lastTimestamp":0}}}')
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # not standard JSON: exactly why a dialect codec is needed
    assert loads(text) == body


def test_fastjson_reads_what_java_writes() -> None:
    # ResetOffsetBody and a numeric-keyed map as fastjson writes them (whitespace tolerated)
    java = ('{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"%RETRY%g"}:12, '
            '{"brokerName":"broker-a","queueId":0,"topic":"%RETRY%g"}:0},'
            '"addrs":{0:"127.0.0.1:10911"},"other":{{"a":1}:true},"list":[1.5,null,"x"]}')
    doc = loads(java)
    assert doc["offsetTable"] == {MessageQueue("%RETRY%g", "broker-a", 3): 12,
                                  MessageQueue("%RETRY%g", "broker-a", 0): 0}
    assert doc["addrs"] == {0: "127.0.0.1:10911"}
    assert doc["other"] == {ObjectKey((("a", 1),)): True}
    assert doc["list"] == [1.5, None, "x"]
    assert dumps({0: "a", "k": float("nan")}) == '{0:"a","k":null}'


def test_broker_stats_rates_and_day_boundaries() -> None:
    day1 = datetime.datetime(2026, 3, 1, 8, 0).timestamp()
    stats = BrokerStats()
    stats.record(day1, 100, 10)
    stats.record(day1 + 5, 150, 10)
    table = stats.table()
    assert table["putTps"] == "10.00 10.00 10.00"
    assert (table["msgPutTotalTodayMorning"], table["msgPutTotalTodayNow"]) == ("100", "150")
    day2 = datetime.datetime(2026, 3, 2, 0, 0, 30).timestamp()
    stats.record(day2, 400, 40)
    stats.record(day2 + 20, 600, 60)
    table = stats.table()
    assert table["msgPutTotalYesterdayMorning"] == "100"
    assert table["msgPutTotalTodayMorning"] == "400"
    assert table["putTps"].split(" ")[1] == "10.00"  # 200 in 20 s inside the 60 s window
    assert table["getTransferedTps"].split(" ")[1] == "1.00"
    assert stats.group_tps("g", 0.0, 5) == 0.0 and stats.group_tps("g", 2.0, 9) == 2.0


# --- helpers ------------------------------------------------------------------------------------

def send_fields(topic: str, queue_id: int, tag: str = "T") -> dict[str, object]:
    return {"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": encode_properties({"TAGS": tag}), "reconsumeTimes": 0,
            "unitMode": False, "batch": False}


async def send(client: RawClient, topic: str, count: int, queues: int) -> None:
    for i in range(count):
        r = await client.call(RC.SEND_MESSAGE, send_fields(topic, i % queues), f"m{i}".encode())
        assert r.code == ResponseCode.SUCCESS, r.remark


def heartbeat(client_id: str, *, consumer_group: str | None = None, topic: str = "",
              producer_group: str | None = None, cpp: bool = False) -> bytes:
    doc: dict[str, object] = {"clientID": client_id, "producerDataSet": [],
                              "consumerDataSet": []}
    if producer_group:
        doc["producerDataSet"] = [{"groupName": producer_group}]
    if consumer_group:
        doc["consumerDataSet"] = [{
            "groupName": consumer_group,
            # C++ sends enum ordinals, Java names
            "consumeType": 1 if cpp else "CONSUME_PASSIVELY",
            "messageModel": 1 if cpp else "CLUSTERING",
            "consumeFromWhere": 4 if cpp else "CONSUME_FROM_FIRST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": "TagA || TagB",
                                     "tagsSet": ["TagA", "TagB"], "codeSet": [1, 2],
                                     "subVersion": 42, "expressionType": "TAG",
                                     "classFilterMode": False}]}]
    return json.dumps(doc).encode()


async def call_as(client: RawClient, code: int, body: bytes, language: str) -> None:
    """Send a request with the given remoting language; wait for its answer."""
    request = make_request(code, None, body)
    request.language = language
    request.version = 317
    await client.send_raw(encode_command(request))
    while True:
        answer = await client.receive()
        assert answer is not None
        if answer.is_response and answer.opaque == request.opaque:
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            return


async def next_request(client: RawClient, code: int) -> RemotingCommand:
    """The next broker-initiated request of `code` (membership notifications skipped)."""
    while True:
        command = await client.receive()
        assert command is not None, "connection closed"
        if command.code == code and not command.is_response:
            return command


# --- statistics ---------------------------------------------------------------------------------

async def test_topic_stats_sum_to_what_was_sent(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("stats_t", 4)
    before = int(time.time() * 1000)
    await send(c, "stats_t", 10, 4)
    r = await c.call(RC.GET_TOPIC_STATS_INFO, {"topic": "stats_t"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = loads(r.body)["offsetTable"]
    assert set(table) == {MessageQueue("stats_t", BROKER, q) for q in range(4)}
    assert sum(v["maxOffset"] for v in table.values()) == 10
    assert [table[MessageQueue("stats_t", BROKER, q)]["maxOffset"] for q in range(4)] == [
        3, 3, 2, 2]
    assert all(v["minOffset"] == 0 for v in table.values())
    assert all(v["lastUpdateTimestamp"] >= before - 1000 for v in table.values())
    assert b'{"brokerName":"ledgerwire-broker","queueId":0,"topic":"stats_t"}:' in r.body

    r = await c.call(RC.GET_TOPIC_STATS_INFO, {"topic": "no_such_topic"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    await c.aclose()


async def test_consume_stats_after_a_group_commits(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("cs_t", 4)
    await send(c, "cs_t", 10, 4)
    await c.call(RC.HEART_BEAT, body=heartbeat("C1", consumer_group="cs_g", topic="cs_t"))
    for queue_id, offset in [(0, 3), (1, 1)]:
        r = await c.call(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "cs_g", "topic": "cs_t",
                                                     "queueId": queue_id,
                                                     "commitOffset": offset})
        assert r.code == ResponseCode.SUCCESS

    r = await c.call(RC.GET_CONSUME_STATS, {"consumerGroup": "cs_g", "topic": "cs_t"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    stats = loads(r.body)
    assert isinstance(stats["consumeTps"], float)
    table = stats["offsetTable"]
    q0, q1, q3 = (table[MessageQueue("cs_t", BROKER, q)] for q in (0, 1, 3))
    assert (q0["brokerOffset"], q0["consumerOffset"]) == (3, 3)
    assert (q1["brokerOffset"], q1["consumerOffset"]) == (3, 1)
    assert (q3["brokerOffset"], q3["consumerOffset"], q3["lastTimestamp"]) == (2, 0, 0)
    assert q0["lastTimestamp"] > 0 and q1["lastTimestamp"] > 0
    diff = sum(v["brokerOffset"] - v["consumerOffset"] for v in table.values())
    assert diff == 10 - 4  # what mqadmin consumerProgress prints as the total diff

    # no topic: the topics the group has offsets for
    r = await c.call(RC.GET_CONSUME_STATS, {"consumerGroup": "cs_g"})
    assert {mq.topic for mq in loads(r.body)["offsetTable"]} == {"cs_t"}
    await c.aclose()


async def test_connections_and_who_consumes(stack: RocketMQStack) -> None:
    java = await RawClient.connect(stack.broker_addr)
    cpp = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("conn_t", 2)
    await call_as(java, RC.HEART_BEAT, heartbeat("J@1", consumer_group="conn_g", topic="conn_t",
                                                 producer_group="conn_pg"), "JAVA")
    await call_as(cpp, RC.HEART_BEAT, heartbeat("C@2", consumer_group="conn_g", topic="conn_t",
                                                cpp=True), "CPP")

    r = await java.call(RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "conn_g"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    body = loads(r.body)
    by_id = {c["clientId"]: c for c in body["connectionSet"]}
    assert set(by_id) == {"J@1", "C@2"}
    assert by_id["J@1"]["language"] == "JAVA" and by_id["C@2"]["language"] == "CPP"
    assert by_id["C@2"]["version"] == 317
    assert by_id["C@2"]["clientAddr"].startswith("127.0.0.1:")
    assert body["consumeType"] == "CONSUME_PASSIVELY"
    assert body["messageModel"] == "CLUSTERING"
    assert body["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    sub = body["subscriptionTable"]["conn_t"]
    assert (sub["subString"], sub["subVersion"], sub["tagsSet"]) == ("TagA || TagB", 42,
                                                                      ["TagA", "TagB"])
    r = await java.call(RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "nobody"})
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE

    r = await java.call(RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "conn_pg"})
    assert r.code == ResponseCode.SUCCESS
    assert [c["clientId"] for c in loads(r.body)["connectionSet"]] == ["J@1"]
    r = await java.call(RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nobody"})
    assert r.code == ResponseCode.SYSTEM_ERROR

    # 300: online subscribers and groups that only have offsets
    await stack.broker.offsets.commit("offline_g", "conn_t", 0, 1)
    r = await java.call(RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "conn_t"})
    assert loads(r.body) == {"groupList": ["conn_g", "offline_g"]}
    await java.aclose()
    await cpp.aclose()


async def test_broker_runtime_info_counts_puts(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("rt_t", 2)
    await send(c, "rt_t", 2, 2)  # opens the queues
    r = await c.call(RC.GET_BROKER_RUNTIME_INFO)
    first = loads(r.body)["table"]
    for key in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgPutTotalTodayNow",
                "msgGetTotalTodayNow", "putTps", "getTransferedTps", "brokerVersionDesc",
                "sendThreadPoolQueueSize", "pageCacheLockTimeMills"):
        assert key in first, key
    await trio.sleep(0.3)
    await send(c, "rt_t", 6, 2)
    r = await c.call(RC.GET_BROKER_RUNTIME_INFO)
    second = loads(r.body)["table"]
    assert int(second["msgPutTotalTodayNow"]) - int(first["msgPutTotalTodayNow"]) == 6
    assert int(second["msgPutTotalTodayNow"]) - int(second["msgPutTotalTodayMorning"]) == 6
    in_tps = [float(x) for x in second["putTps"].split(" ")]
    assert len(in_tps) == 3 and in_tps[0] > 0
    await c.aclose()


async def test_system_topic_lists_for_the_console(stack: RocketMQStack) -> None:
    ns = await RawClient.connect(stack.name_server_addr)
    r = await ns.call(RC.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert r.code == ResponseCode.SUCCESS, r.remark
    body = loads(r.body)
    assert body["topicList"] == ["DefaultCluster", BROKER]
    assert body["brokerAddr"] == stack.broker_addr
    c = await RawClient.connect(body["brokerAddr"])
    r = await c.call(RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} <= set(
        loads(r.body)["topicList"])
    await ns.aclose()
    await c.aclose()


# --- subscription groups ------------------------------------------------------------------------

async def test_subscription_groups_are_durable(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    config = {"groupName": "sg_g", "consumeEnable": False, "retryMaxTimes": 3,
              "retryQueueNums": 1, "brokerId": 0, "unknownField": 1}
    r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                     body=json.dumps({"groupName": "bad/name"}).encode())
    assert r.code == ResponseCode.MESSAGE_ILLEGAL

    # a second store object on the same metadata store sees it (nothing lives in memory only)
    stored = await SubscriptionGroupStore(stack.store).get("sg_g")
    assert stored is not None and stored["retryMaxTimes"] == 3 and not stored["consumeEnable"]
    assert "unknownField" not in stored
    assert await stack.store.exists(f"{SUBSCRIPTION_GROUPS_PATH}/sg_g") is not None

    await stack.broker.offsets.commit("offsets_only_g", "t", 0, 5)
    r = await c.call(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    body = loads(r.body)
    table = body["subscriptionGroupTable"]
    assert table["sg_g"]["retryMaxTimes"] == 3 and table["sg_g"]["consumeEnable"] is False
    assert table["sg_g"]["whichBrokerWhenConsumeSlowly"] == 1  # default filled in
    assert table["offsets_only_g"]["retryMaxTimes"] == 16
    assert set(body["dataVersion"]) == {"counter", "timestamp"}

    # update in place, then delete with its offsets
    r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                     body=json.dumps({**config, "retryMaxTimes": 5}).encode())
    assert (await SubscriptionGroupStore(stack.store).get("sg_g") or {})["retryMaxTimes"] == 5
    await stack.broker.offsets.commit("sg_g", "t", 0, 9)
    r = await c.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "sg_g", "removeOffset": True})
    assert r.code == ResponseCode.SUCCESS
    assert await SubscriptionGroupStore(stack.store).get("sg_g") is None
    assert stack.broker.offsets.query("sg_g", "t", 0) is None
    r = await c.call(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert "sg_g" not in loads(r.body)["subscriptionGroupTable"]
    await c.aclose()


async def test_subscription_group_store_survives_reopening_the_embedded_store(
        tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path}")
    try:
        groups = SubscriptionGroupStore(store)
        await groups.put("g1", {"groupName": "g1", "retryMaxTimes": 2})
        await groups.put("g1", {"groupName": "g1", "retryMaxTimes": 4})  # CAS update
        await groups.put("g2", {"groupName": "g2"})
        assert await groups.delete("g2") and not await groups.delete("g2")
    finally:
        await store.close()
    store = await open_store(f"embedded:{tmp_path}")
    try:
        assert await SubscriptionGroupStore(store).all() == {
            "g1": {"groupName": "g1", "retryMaxTimes": 4}}
        await store.set(f"{SUBSCRIPTION_GROUPS_PATH}/g1", b'{"format":99}', -1)
        with pytest.raises(SubscriptionGroupStoreError):
            await SubscriptionGroupStore(store).get("g1")
    finally:
        await store.close()


# --- reset offsets ------------------------------------------------------------------------------

async def test_reset_offset_commits_and_notifies_each_client_in_its_form(
        stack: RocketMQStack) -> None:
    java = await RawClient.connect(stack.broker_addr)
    cpp = await RawClient.connect(stack.broker_addr)
    admin = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("rs_t", 2)
    start = int(time.time() * 1000) - 1000
    await send(admin, "rs_t", 6, 2)
    ext = {"topic": "rs_t", "group": "rs_g", "timestamp": start, "isForce": True}

    r = await admin.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.SYSTEM_ERROR and "not exist" in (r.remark or "")
    for q in (0, 1):
        await admin.call(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "rs_g", "topic": "rs_t",
                                                     "queueId": q, "commitOffset": 3})
    r = await admin.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE  # mqadmin then uses its old method

    await call_as(java, RC.HEART_BEAT, heartbeat("J", consumer_group="rs_g", topic="rs_t"),
                  "JAVA")
    await call_as(cpp, RC.HEART_BEAT, heartbeat("C", consumer_group="rs_g", topic="rs_t",
                                                cpp=True), "CPP")
    # not forced, to the end: offsets only move back, so nothing changes
    r = await admin.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "timestamp": -1,
                                                            "isForce": False})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert set(loads(r.body)["offsetTable"].values()) == {3}
    for client in (java, cpp):
        await next_request(client, RC.RESET_CONSUMER_CLIENT_OFFSET)

    r = await admin.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert r.code == ResponseCode.SUCCESS, r.remark
    expected = {MessageQueue("rs_t", BROKER, 0): 0, MessageQueue("rs_t", BROKER, 1): 0}
    assert loads(r.body)["offsetTable"] == expected
    assert [stack.broker.offsets.query("rs_g", "rs_t", q) for q in (0, 1)] == [0, 0]

    note = await next_request(java, RC.RESET_CONSUMER_CLIENT_OFFSET)
    assert note.is_oneway
    assert note.ext_fields["group"] == "rs_g" and note.ext_fields["topic"] == "rs_t"
    assert note.ext_fields["timestamp"] == str(start) and note.ext_fields["isForce"] == "false"
    assert loads(note.body)["offsetTable"] == expected  # ResetOffsetBody, MessageQueue keys
    note = await next_request(cpp, RC.RESET_CONSUMER_CLIENT_OFFSET)
    for_c = json.loads(note.body)  # ResetOffsetBodyForC: plain JSON jsoncpp can read
    assert sorted((e["queueId"], e["offset"], e["topic"], e["brokerName"])
                  for e in for_c["offsetTable"]) == [(0, 0, "rs_t", BROKER), (1, 0, "rs_t", BROKER)]
    for client in (java, cpp, admin):
        await client.aclose()


@pytest.mark.integration
@pytest.mark.slow
async def test_reset_offset_makes_the_cpp_push_consumer_receive_again(
        stack: RocketMQStack) -> None:
    from tests.rocketmq.cpp_client import Consumer

    ns = stack.name_server_addr
    await stack.broker.ensure_topic("rs_cpp", 4)
    start = int(time.time() * 1000) - 1000
    admin = await RawClient.connect(stack.broker_addr)
    await send(admin, "rs_cpp", 10, 4)

    consumer: list[Consumer] = []

    def consume_all() -> int:
        c = Consumer(ns, "rs_cpp_g", "rs_cpp", "*")
        consumer.append(c)
        assert c.wait_for(lambda got: len(got) >= 10, 40), len(c.received)
        return len(c.received)

    try:
        assert await trio.to_thread.run_sync(consume_all) == 10
        for _ in range(150):  # the client persists its offsets every few seconds
            if sum(stack.broker.offsets.query("rs_cpp_g", "rs_cpp", q) or 0
                   for q in range(4)) >= 10:
                break
            await trio.sleep(0.2)
        else:
            raise AssertionError("the C++ consumer never committed its offsets")
        r = await admin.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": "rs_cpp", "group": "rs_cpp_g", "timestamp": start, "isForce": True})
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert set(loads(r.body)["offsetTable"].values()) == {0}
        again = await trio.to_thread.run_sync(
            lambda: consumer[0].wait_for(lambda got: len(got) >= 20, 40))
        assert again, len(consumer[0].received)
        bodies = sorted(r.body for r in consumer[0].received)
        assert bodies == sorted([f"m{i}".encode() for i in range(10)] * 2)

        # mqadmin consumerConnection sees the real C++ client as such
        r = await admin.call(RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "rs_cpp_g"})
        connections = loads(r.body)["connectionSet"]
        assert [c["language"] for c in connections] == ["CPP"]
        assert loads(r.body)["subscriptionTable"]["rs_cpp"]["subString"] == "*"
    finally:
        if consumer:
            await trio.to_thread.run_sync(consumer[0].shutdown)
        await admin.aclose()
