"""Stored subscription-group configs enforced as Apache RocketMQ 4.9 does: consumeEnable and
consumeBroadcastEnable on PULL_MESSAGE (NO_PERMISSION with Java's remarks), retryMaxTimes and
retryQueueNums on CONSUMER_SEND_MSG_BACK, read from the store's in-memory copy (never a store
read per pull) that follows changes made through other brokers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio

from gateway.rocketmq.subscription_groups import SUBSCRIPTION_GROUPS_PATH, SubscriptionGroupStore
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from protocols.rocketmq.topic_names import to_storage
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext


async def update_group(client: RawClient, **config: Any) -> None:
    r = await client.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                          body=json.dumps(config).encode())
    assert r.code == ResponseCode.SUCCESS, r.remark


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110  (the follower announces nothing)
            await trio.sleep(0.01)


class CountingReads:
    """Counts subscription-group reads made while installed (get / children / exists)."""

    def __init__(self, store: MetadataStore) -> None:
        self.reads = 0
        self._store = store
        self._saved = {name: getattr(store, name) for name in ("get", "children", "exists")}

    def __enter__(self) -> CountingReads:
        for name, original in self._saved.items():
            setattr(self._store, name, self._counting(original))
        return self

    def _counting(self, original: Any) -> Any:
        async def read(path: str, *args: Any, **kwargs: Any) -> Any:
            if path.startswith(SUBSCRIPTION_GROUPS_PATH):
                self.reads += 1
            return await original(path, *args, **kwargs)
        return read

    def __exit__(self, *exc: object) -> None:
        for name in self._saved:
            delattr(self._store, name)  # back to the class's methods


async def test_consume_disabled_group_is_refused_without_store_reads(
        stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("cfg_t", {"TAGS": "a"}), b"m0")
    assert r.code == ResponseCode.SUCCESS, r.remark
    await update_group(c, groupName="off_g", consumeEnable=False)
    await trio.sleep(0.2)  # the follower's re-read after the change marker
    with CountingReads(stack.store) as counter:
        for _ in range(20):
            r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_t", 0, 0, group="off_g"))
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION,
                                          "subscription group no permission, off_g")
        r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_t", 0, 0, group="other_g"))
        assert r.code == ResponseCode.SUCCESS  # only that group is refused
    assert counter.reads == 0
    await update_group(c, groupName="off_g", consumeEnable=True)
    r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_t", 0, 0, group="off_g"))
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_stored_messages(r.body)] == [b"m0"]
    # deleting the config restores the defaults (consumption allowed)
    await update_group(c, groupName="off_g", consumeEnable=False)
    r = await c.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "off_g", "removeOffset": False})
    assert r.code == ResponseCode.SUCCESS
    r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_t", 0, 0, group="off_g"))
    assert r.code == ResponseCode.SUCCESS
    await c.aclose()


async def test_a_change_made_through_another_broker_reaches_the_pull_path(
        stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await c.call(RC.SEND_MESSAGE_V2, send_ext("cfg_w", {}), b"m")
    r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_w", 0, 0, group="remote_g"))
    assert r.code == ResponseCode.SUCCESS
    other_broker = SubscriptionGroupStore(stack.store)  # another process on the same store
    await other_broker.put("remote_g", {"groupName": "remote_g", "consumeEnable": False})
    with trio.fail_after(5):
        while True:
            r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_w", 0, 0, group="remote_g"))
            if r.code == ResponseCode.NO_PERMISSION:
                break
            await trio.sleep(0.02)
    await other_broker.delete("remote_g")
    await wait_until(lambda: stack.broker.subscription_groups.cached("remote_g") is None)
    await c.aclose()


async def test_broadcast_disabled_refuses_a_broadcasting_group(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await c.call(RC.SEND_MESSAGE_V2, send_ext("cfg_b", {"TAGS": "x"}), b"m")
    hb = {"clientID": "B", "producerDataSet": [],
          "consumerDataSet": [{"groupName": "bc_g", "consumeType": "CONSUME_PASSIVELY",
                               "messageModel": "BROADCASTING",
                               "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                               "subscriptionDataSet": [{"topic": "cfg_b", "subString": "*",
                                                        "tagsSet": [], "codeSet": [],
                                                        "subVersion": 1}],
                               "unitMode": False}]}
    r = await c.call(RC.HEART_BEAT, body=json.dumps(hb).encode())
    assert r.code == ResponseCode.SUCCESS
    java_style = pull_ext("cfg_b", 0, 0, group="bc_g")
    java_style["sysFlag"] = 0x2  # the subscription comes from the heartbeat
    del java_style["subscription"]
    r = await c.call(RC.PULL_MESSAGE, java_style)
    assert r.code == ResponseCode.SUCCESS  # broadcast allowed by default
    await update_group(c, groupName="bc_g", consumeBroadcastEnable=False)
    r = await c.call(RC.PULL_MESSAGE, java_style)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION,
                                  "the consumer group[bc_g] can not consume by broadcast way")
    # Java checks it only where the subscription comes from the heartbeat
    r = await c.call(RC.PULL_MESSAGE, pull_ext("cfg_b", 0, 0, group="bc_g"))
    assert r.code == ResponseCode.SUCCESS
    await c.aclose()


async def _send_back(c: RawClient, stack: RocketMQStack, topic: str, group: str,
                     **extra: object) -> None:
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext(topic, {"TAGS": "t"}), b"payload")
    _, _, offset = decode_offset_message_id(r.ext_fields["msgId"])
    ext: dict[str, object] = {"group": group, "offset": offset, "delayLevel": 0,
                              "originMsgId": "X", "originTopic": topic, "unitMode": False}
    ext.update(extra)
    r = await c.call(RC.CONSUMER_SEND_MSG_BACK, ext)
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_retry_max_times_decides_the_dead_letter_queue(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    # no config: the broker's max_reconsume_times (16) -> a first send-back is retried
    await _send_back(c, stack, "cfg_r", "plain_g")
    assert to_storage("%DLQ%plain_g") not in stack.topics.topics()
    assert to_storage("%RETRY%plain_g") in stack.topics.topics()
    # retryMaxTimes 0: dead on the first send-back, whether or not the client names a limit
    await update_group(c, groupName="dead_g", retryMaxTimes=0)
    await _send_back(c, stack, "cfg_r", "dead_g")
    await _send_back(c, stack, "cfg_r", "dead_g", maxReconsumeTimes=16)
    r = await c.call(RC.PULL_MESSAGE, pull_ext("%DLQ%dead_g", 0, 0))
    assert r.code == ResponseCode.SUCCESS, r.remark
    dead = decode_stored_messages(r.body)
    assert [m.body for m in dead] == [b"payload", b"payload"]
    assert all(m.reconsume_times == 1 for m in dead)
    assert to_storage("%RETRY%dead_g") not in stack.topics.topics()
    await c.aclose()


async def test_no_retry_queue_drops_send_backs(stack: RocketMQStack) -> None:
    c = await RawClient.connect(stack.broker_addr)
    await update_group(c, groupName="noq_g", retryQueueNums=0)
    await _send_back(c, stack, "cfg_q", "noq_g")
    assert to_storage("%RETRY%noq_g") not in stack.topics.topics()
    assert to_storage("%DLQ%noq_g") not in stack.topics.topics()
    await c.aclose()


async def test_store_copy_follows_and_own_writes_are_immediate(store: MetadataStore) -> None:
    mine, theirs = SubscriptionGroupStore(store), SubscriptionGroupStore(store)
    await theirs.put("early", {"groupName": "early", "retryMaxTimes": 1})
    await mine.reload()
    assert mine.cached("early") == {"groupName": "early", "retryMaxTimes": 1}
    await mine.put("own", {"groupName": "own"})
    assert mine.cached("own") == {"groupName": "own"}  # without a follower
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mine.follow)
        await theirs.put("late", {"groupName": "late", "consumeEnable": False})
        await theirs.put("early", {"groupName": "early", "retryMaxTimes": 7})
        await wait_until(lambda: (mine.cached("early") or {}).get("retryMaxTimes") == 7
                         and mine.cached("late") is not None)
        await theirs.delete("own")
        await wait_until(lambda: mine.cached("own") is None)
        nursery.cancel_scope.cancel()
    assert await mine.all() == {"early": {"groupName": "early", "retryMaxTimes": 7},
                                "late": {"groupName": "late", "consumeEnable": False}}
