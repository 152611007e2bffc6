"""The broker and name server over raw remoting frames (JSON and ROCKETMQ binary headers)."""

from __future__ import annotations

import json
import random
import struct
import time

import pytest
import trio

from protocols.kafka.record_batch import build_batch, decode_records
from protocols.rocketmq.codec import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    encode_command,
    make_request,
)
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import (
    BatchedMessage,
    decode_stored_messages,
    encode_batch_body,
    encode_properties,
)
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient


def send_ext(topic: str, props: dict[str, str], *, queue_id: int = 0, v2: bool = True,
             default_topic: str = "TBW102") -> dict[str, object]:
    fields = {"producerGroup": "pg", "topic": topic, "defaultTopic": default_topic,
              "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
              "bornTimestamp": 1_700_000_000_000, "flag": 0,
              "properties": encode_properties(props), "reconsumeTimes": 0, "unitMode": False,
              "batch": False}
    if not v2:
        return fields
    names = ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
             "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
             "maxReconsumeTimes", "batch"]
    letters = "abcdefghijklm"
    return {letters[i]: fields[n] for i, n in enumerate(names) if n in fields}


def pull_ext(topic: str, queue_id: int, offset: int, sub: str = "*", *, suspend_ms: int = 0,
             group: str = "cg") -> dict[str, object]:
    sys_flag = 0x4 | (0x2 if suspend_ms else 0)
    return {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": 32, "sysFlag": sys_flag, "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms, "subscription": sub, "subVersion": 0,
            "expressionType": "TAG"}


@pytest.mark.parametrize("serialize", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
async def test_send_then_pull_with_tag_filter(stack: RocketMQStack, serialize: int) -> None:
    client = await RawClient.connect(stack.broker_addr)
    sent = []
    for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC"]):
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {
            "TAGS": tag, "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}", "color": "red"}),
            f"body-{i}".encode(), serialize_type=serialize)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.serialize_type == serialize
        assert r.ext_fields["queueId"] == "0"
        assert int(r.ext_fields["queueOffset"]) == i
        sent.append(r.ext_fields["msgId"])
    host, port, _ = decode_offset_message_id(sent[0])
    assert (host, f"{port}") == ("127.0.0.1", stack.broker_addr.rsplit(":", 1)[1])

    r = await client.call(RC.PULL_MESSAGE, pull_ext("orders", 0, 0, "TagA || TagC"),
                          serialize_type=serialize)
    assert r.code == ResponseCode.SUCCESS, r.remark
    msgs = decode_stored_messages(r.body)
    assert [m.body for m in msgs] == [b"body-0", b"body-2", b"body-3"]
    assert [m.queue_offset for m in msgs] == [0, 2, 3]
    assert msgs[0].properties["KEYS"] == "k0" and msgs[0].properties["color"] == "red"
    assert msgs[0].topic == "orders" and msgs[0].born_timestamp == 1_700_000_000_000
    assert r.ext_fields["nextBeginOffset"] == "4" and r.ext_fields["maxOffset"] == "4"

    # VIEW_MESSAGE_BY_ID finds a message from the commit-log offset of its id
    _, _, commit_offset = decode_offset_message_id(sent[1])
    r = await client.call(RC.VIEW_MESSAGE_BY_ID, {"offset": commit_offset})
    assert r.code == ResponseCode.SUCCESS
    [viewed] = decode_stored_messages(r.body)
    assert viewed.body == b"body-1" and viewed.properties["TAGS"] == "TagB"
    await client.aclose()


async def test_the_stored_form_is_a_kafka_record(stack: RocketMQStack) -> None:
    client = await RawClient.connect(stack.broker_addr)
    r = await client.call(RC.SEND_MESSAGE, send_ext("t1", {"TAGS": "x", "KEYS": "key-1"},
                                                    v2=False), b"hello")
    assert r.code == ResponseCode.SUCCESS, r.remark
    plog = await stack.topics.partition("t1", 0)
    [batch] = await plog.read(0, 1 << 20)
    [record] = decode_records(batch)
    assert record.value == b"hello" and record.key == b"key-1"
    headers = dict(record.headers)
    assert headers["TAGS"] == b"x" and headers["KEYS"] == b"key-1"
    # and a Kafka-written record reads back over RocketMQ with its headers as properties
    await plog.append(build_batch([(b"kkey", b"from-kafka")]))
    r = await client.call(RC.PULL_MESSAGE, pull_ext("t1", 0, 1))
    [m] = decode_stored_messages(r.body)
    assert m.body == b"from-kafka" and m.properties["KEYS"] == "kkey" and m.queue_offset == 1
    await client.aclose()


async def test_batch_send(stack: RocketMQStack) -> None:
    client = await RawClient.connect(stack.broker_addr)
    body = encode_batch_body([BatchedMessage(f"m{i}".encode(), 0, {"TAGS": "b"})
                              for i in range(5)])
    r = await client.call(RC.SEND_BATCH_MESSAGE, send_ext("batched", {}), body)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(r.ext_fields["msgId"].split(",")) == 5
    r = await client.call(RC.PULL_MESSAGE, pull_ext("batched", 0, 0))
    assert [m.body for m in decode_stored_messages(r.body)] == [f"m{i}".encode()
                                                                  for i in range(5)]
    await client.aclose()


async def test_long_poll_wakes_on_send(stack: RocketMQStack) -> None:
    await stack.broker.ensure_topic("lp", 1)
    puller = await RawClient.connect(stack.broker_addr)
    sender = await RawClient.connect(stack.broker_addr)
    result: list[object] = []

    async def pull() -> None:
        result.append(await puller.call(RC.PULL_MESSAGE, pull_ext("lp", 0, 0, suspend_ms=10_000)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pull)
        await trio.sleep(0.3)
        assert not result
        r = await sender.call(RC.SEND_MESSAGE_V2, send_ext("lp", {}), b"late")
        assert r.code == ResponseCode.SUCCESS
    [answer] = result
    assert answer.code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
    # an empty queue without suspension: PULL_NOT_FOUND; out of range: PULL_OFFSET_MOVED
    r = await puller.call(RC.PULL_MESSAGE, pull_ext("lp", 0, 1))
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "1"
    r = await puller.call(RC.PULL_MESSAGE, pull_ext("lp", 0, 99))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "1"
    await puller.aclose()
    await sender.aclose()


async def test_name_server_routes(stack: RocketMQStack) -> None:
    ns = await RawClient.connect(stack.name_server_addr)
    r = await ns.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await ns.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    assert r.code == ResponseCode.SUCCESS
    await stack.broker.ensure_topic("routed", 3)
    r = await ns.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "routed"})
    route = json.loads(r.body)
    assert route["queueDatas"][0]["writeQueueNums"] == 3
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": stack.broker_addr}
    r = await ns.call(RC.GET_BROKER_CLUSTER_INFO)
    info = json.loads(r.body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["ledgerwire-broker"]}
    r = await ns.call(9999)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    await ns.aclose()


async def test_consumer_offsets_and_queue_bounds(stack: RocketMQStack) -> None:
    client = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("offs", 2)
    for _ in range(3):
        await client.call(RC.SEND_MESSAGE_V2, send_ext("offs", {}, queue_id=1), b"x")
    q = {"consumerGroup": "g1", "topic": "offs", "queueId": 1}
    r = await client.call(RC.QUERY_CONSUMER_OFFSET, q)
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "0"
    r = await client.call(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 2})
    assert r.code == ResponseCode.SUCCESS
    r = await client.call(RC.QUERY_CONSUMER_OFFSET, q)
    assert r.ext_fields["offset"] == "2"
    assert stack.broker.offsets.query("g1", "offs", 1) == 2
    r = await client.call(RC.GET_MAX_OFFSET, {"topic": "offs", "queueId": 1})
    assert r.ext_fields["offset"] == "3"
    r = await client.call(RC.GET_MIN_OFFSET, {"topic": "offs", "queueId": 1})
    assert r.ext_fields["offset"] == "0"
    r = await client.call(RC.SEARCH_OFFSET_BY_TIMESTAMP,
                          {"topic": "offs", "queueId": 1, "timestamp": 0})
    assert r.ext_fields["offset"] == "0"
    r = await client.call(RC.GET_MAX_OFFSET, {"topic": "offs", "queueId": 7})
    assert r.code != ResponseCode.SUCCESS
    await client.aclose()


async def test_heartbeat_consumer_list_and_locks(stack: RocketMQStack) -> None:
    a = await RawClient.connect(stack.broker_addr)
    b = await RawClient.connect(stack.broker_addr)
    hb = {"clientID": "A", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg1", "consumeType": "CONSUME_PASSIVELY", "messageModel": 1,
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "t", "subString": "x || y"}]}]}
    r = await a.call(RC.HEART_BEAT, body=json.dumps(hb).encode())
    assert r.code == ResponseCode.SUCCESS
    assert "%RETRY%cg1".replace("%", ".") in stack.topics.topics()
    r = await b.call(RC.HEART_BEAT, body=json.dumps({**hb, "clientID": "B"}).encode())
    # A hears that the group changed
    note = await a.receive()
    assert note is not None and note.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and note.is_oneway
    r = await a.call(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg1"})
    assert json.loads(r.body) == {"consumerIdList": ["A", "B"]}
    mq = {"topic": "t", "brokerName": "ledgerwire-broker", "queueId": 0}
    r = await a.call(RC.LOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": "A", "mqSet": [mq]}).encode())
    assert json.loads(r.body)["lockOKMQSet"] == [mq]
    r = await b.call(RC.LOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": "B", "mqSet": [mq]}).encode())
    assert json.loads(r.body)["lockOKMQSet"] == []
    r = await a.call(RC.UNLOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": "A", "mqSet": [mq]}).encode())
    r = await b.call(RC.LOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": "B", "mqSet": [mq]}).encode())
    assert json.loads(r.body)["lockOKMQSet"] == [mq]
    await b.aclose()
    with trio.fail_after(5):
        while stack.broker.clients.consumer_ids("cg1") != ["A"]:  # noqa: ASYNC110
            await trio.sleep(0.01)
    r = await a.call(RC.CHECK_CLIENT_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    r = await a.call(RC.UNREGISTER_CLIENT, {"clientID": "A", "consumerGroup": "cg1"})
    assert r.code == ResponseCode.SUCCESS
    r = await a.call(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg1"})
    assert r.code == ResponseCode.SYSTEM_ERROR  # nobody left
    await a.aclose()


async def test_bad_input_never_crashes(stack: RocketMQStack) -> None:
    # unknown code: an error response
    c = await RawClient.connect(stack.broker_addr)
    r = await c.call(4242)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # missing header field: an error response, connection still usable
    r = await c.call(RC.PULL_MESSAGE, {"topic": "x"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("bad|name", {}), b"x")
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    # oneway requests are never answered
    await c.send_raw(encode_command(make_request(RC.CHECK_CLIENT_CONFIG, oneway=True)))
    r = await c.call(RC.CHECK_CLIENT_CONFIG)
    assert r.code == ResponseCode.SUCCESS and not c.pending
    await c.aclose()
    bad_frames = [
        struct.pack(">ii", 8, 0x02000004) + b"abcd",            # unknown serialisation byte
        struct.pack(">ii", 8, 0x00000004) + b"{{{{",            # JSON that is not JSON
        struct.pack(">ii", 8, 0x00FFFFFF) + b"abcd",            # header longer than the frame
        struct.pack(">i", 1 << 30),                              # oversize frame
        struct.pack(">ii", 6, 0x01000002) + b"ab",               # truncated binary header
        struct.pack(">i", 2) + b"xx",                            # length below the minimum
    ]
    for frame in bad_frames:
        c = await RawClient.connect(stack.broker_addr)
        await c.send_raw(frame)
        assert await c.receive() is None  # closed, not crashed
        await c.aclose()
    c = await RawClient.connect(stack.broker_addr)
    assert (await c.call(RC.CHECK_CLIENT_CONFIG)).code == ResponseCode.SUCCESS
    await c.aclose()


async def test_query_message_by_key_and_admin_codes(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "admin_t", "readQueueNums": 2,
                                                  "writeQueueNums": 2, "perm": 6})
    assert r.code == ResponseCode.SUCCESS
    assert stack.topics.topics()["admin_t"].partitions == 2
    r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "admin_t", "readQueueNums": 3,
                                                  "writeQueueNums": 3, "perm": 6})
    assert stack.topics.topics()["admin_t"].partitions == 3
    r = await c.call(RC.GET_ALL_TOPIC_CONFIG)
    table = json.loads(r.body)["topicConfigTable"]
    assert table["admin_t"]["writeQueueNums"] == 3
    for i in range(3):
        await c.call(RC.SEND_MESSAGE_V2, send_ext("admin_t", {"KEYS": f"order-{i} shared"},
                                                  queue_id=i), f"v{i}".encode())
    r = await c.call(RC.QUERY_MESSAGE, {"topic": "admin_t", "key": "order-1", "maxNum": 32,
                                        "beginTimestamp": 0, "endTimestamp": 2**60})
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_stored_messages(r.body)] == [b"v1"]
    r = await c.call(RC.QUERY_MESSAGE, {"topic": "admin_t", "key": "shared", "maxNum": 32,
                                        "beginTimestamp": 0, "endTimestamp": 2**60})
    assert sorted(m.body for m in decode_stored_messages(r.body)) == [b"v0", b"v1", b"v2"]
    r = await c.call(RC.QUERY_MESSAGE, {"topic": "admin_t", "key": "nope", "maxNum": 32,
                                        "beginTimestamp": 0, "endTimestamp": 2**60})
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    r = await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": "admin_t"})
    assert r.code == ResponseCode.SUCCESS and "admin_t" not in stack.topics.topics()
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("admin_t", {}, default_topic=""), b"x")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    await c.aclose()


async def test_send_back_goes_to_retry_then_dlq(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("sb", {"TAGS": "t"}), b"payload")
    _, _, clo = decode_offset_message_id(r.ext_fields["msgId"])
    # delayLevel -1: straight to the DLQ (what a client asks for a message it gives up on)
    r = await c.call(RC.CONSUMER_SEND_MSG_BACK, {"group": "G", "offset": clo, "delayLevel": -1,
                                                 "originMsgId": "X", "originTopic": "sb",
                                                 "unitMode": False, "maxReconsumeTimes": 16})
    assert r.code == ResponseCode.SUCCESS
    r = await c.call(RC.PULL_MESSAGE, pull_ext("%DLQ%G", 0, 0))
    [dead] = decode_stored_messages(r.body)
    assert dead.body == b"payload" and dead.reconsume_times == 1
    assert dead.properties["RETRY_TOPIC"] == "sb" and dead.properties["ORIGIN_MESSAGE_ID"] == "X"
    await c.aclose()


async def test_java_style_pull_uses_the_heartbeat_subscription(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    for tag in ("keep", "drop", "keep"):
        await c.call(RC.SEND_MESSAGE_V2, send_ext("javapull", {"TAGS": tag}), tag.encode())
    hb = {"clientID": "J", "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
          "consumerDataSet": [{"groupName": "jg", "consumeType": "CONSUME_PASSIVELY",
                               "messageModel": "CLUSTERING",
                               "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                               "subscriptionDataSet": [{"topic": "javapull", "subString": "keep",
                                                        "tagsSet": ["keep"], "codeSet": [3287954],
                                                        "subVersion": 1}],
                               "unitMode": False}]}
    await c.call(RC.HEART_BEAT, body=json.dumps(hb).encode())
    ext = pull_ext("javapull", 0, 0, group="jg")
    ext["sysFlag"] = 0x2  # suspend only: no subscription in the request
    del ext["subscription"]
    r = await c.call(RC.PULL_MESSAGE, ext)
    assert [m.body for m in decode_stored_messages(r.body)] == [b"keep", b"keep"]
    await c.aclose()


async def test_arbitrary_delivery_times(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await stack.broker.ensure_topic("timed", 1)
    start = trio.current_time()
    now_ms = int(time.time() * 1000)
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("timed", {"__STARTDELIVERTIME":
                                                            str(now_ms + 1500)}), b"later")
    assert r.code == ResponseCode.SUCCESS
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("timed", {"TIMER_DELAY_MS": "700"}), b"sooner")
    assert r.code == ResponseCode.SUCCESS
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("timed", {"__STARTDELIVERTIME": "1"}), b"now")
    assert r.code == ResponseCode.SUCCESS  # a time in the past: stored at once
    r = await c.call(RC.PULL_MESSAGE, pull_ext("timed", 0, 0))
    assert [m.body for m in decode_stored_messages(r.body)] == [b"now"]
    r = await c.call(RC.PULL_MESSAGE, pull_ext("timed", 0, 1, suspend_ms=5000))
    assert [m.body for m in decode_stored_messages(r.body)] == [b"sooner"]
    assert trio.current_time() - start >= 0.7 - 0.05
    r = await c.call(RC.PULL_MESSAGE, pull_ext("timed", 0, 2, suspend_ms=5000))
    [later] = decode_stored_messages(r.body)
    assert later.body == b"later" and "TIMER_DELIVER_MS" not in later.properties
    assert trio.current_time() - start >= 1.5 - 0.1
    await c.aclose()


async def test_random_bytes_on_the_wire(stack: RocketMQStack) -> None:
    rng = random.Random(6)
    for _ in range(30):
        c = await RawClient.connect(stack.broker_addr)
        length = rng.randrange(0, 64)
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        await c.send_raw(struct.pack(">i", length) + payload)
        with trio.move_on_after(0.2):
            await c.receive()  # an answer or a close, never a hang of the server
        await c.aclose()
    c = await RawClient.connect(stack.broker_addr)
    assert (await c.call(RC.CHECK_CLIENT_CONFIG)).code == ResponseCode.SUCCESS
    ns = await RawClient.connect(stack.name_server_addr)
    await ns.send_raw(struct.pack(">ii", 8, 0x01000004) + b"\x00\x01\x02\x03")
    assert await ns.receive() is None
    await c.aclose()
    await ns.aclose()
