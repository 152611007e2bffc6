"""State that must survive a broker crash: consumer offsets, pending delays, half messages.

The "crash" abandons the first broker without closing anything; the second opens the same
metadata store and bookies (its managed ledgers fence and recover the first one's)."""

from __future__ import annotations

import trio

from gateway.rocketmq.transactions import SCAN_GROUP
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from protocols.rocketmq.topic_names import HALF_TOPIC
from tests.rocketmq.conftest import start_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext

FAST = {"delay_levels": "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
        "transaction_check_timeout_s": 60.0}


async def test_offsets_delays_and_half_messages_survive_a_crash(
        store: MetadataStore, bookkeeper: MemoryBookKeeper) -> None:
    async with trio.open_nursery() as first:
        s1 = await start_stack(store, bookkeeper, first, **FAST)
        await s1.broker.ensure_topic("durable", 1)
        c = await RawClient.connect(s1.broker_addr)
        r = await c.call(RC.SEND_MESSAGE_V2, send_ext("durable", {"TAGS": "x"}), b"plain")
        assert r.code == ResponseCode.SUCCESS
        r = await c.call(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "durable",
                                                     "queueId": 0, "commitOffset": 1})
        assert r.code == ResponseCode.SUCCESS
        r = await c.call(RC.SEND_MESSAGE_V2, send_ext("durable", {"DELAY": "2", "UNIQ_KEY": "D"}),
                         b"delayed")
        assert r.code == ResponseCode.SUCCESS
        half_ext = send_ext("durable", {"UNIQ_KEY": "H1"})
        half_ext["f"] = 4  # sysFlag: transaction prepared
        r = await c.call(RC.SEND_MESSAGE_V2, half_ext, b"half")
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["transactionId"] == "H1"
        _, _, half_commit_offset = decode_offset_message_id(r.ext_fields["msgId"])
        rolled_back = send_ext("durable", {"UNIQ_KEY": "H2"})
        rolled_back["f"] = 4
        r = await c.call(RC.SEND_MESSAGE_V2, rolled_back, b"never")
        _, _, rollback_offset = decode_offset_message_id(r.ext_fields["msgId"])
        await c.call(RC.END_TRANSACTION, {"producerGroup": "pg", "commitLogOffset": rollback_offset,
                                          "commitOrRollback": 12})
        await c.aclose()
        first.cancel_scope.cancel()  # crash: nothing is closed
    crashed_at = trio.current_time()

    async with trio.open_nursery() as second:
        s2 = await start_stack(store, bookkeeper, second, **FAST)
        c = await RawClient.connect(s2.broker_addr)
        r = await c.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "durable",
                                                    "queueId": 0})
        assert r.ext_fields["offset"] == "1"
        # the half message stays invisible until committed
        r = await c.call(RC.PULL_MESSAGE, pull_ext("durable", 0, 1, suspend_ms=5000))
        assert r.code == ResponseCode.SUCCESS
        [delayed] = decode_stored_messages(r.body)
        assert delayed.body == b"delayed" and "DELAY" not in delayed.properties
        assert trio.current_time() - crashed_at < 5
        r = await c.call(RC.PULL_MESSAGE, pull_ext("durable", 0, 2))
        assert r.code == ResponseCode.PULL_NOT_FOUND
        await c.send_raw(b"")  # no-op
        r = await c.call(RC.END_TRANSACTION, {"producerGroup": "pg", "tranStateTableOffset": 0,
                                              "commitLogOffset": half_commit_offset,
                                              "commitOrRollback": 8,
                                              "fromTransactionCheck": False})
        assert r.code == ResponseCode.SUCCESS
        r = await c.call(RC.PULL_MESSAGE, pull_ext("durable", 0, 2, suspend_ms=5000))
        [committed] = decode_stored_messages(r.body)
        assert committed.body == b"half" and committed.sys_flag & 0xC == 0x8
        # a second decision for the same half message changes nothing
        await c.call(RC.END_TRANSACTION, {"producerGroup": "pg",
                                          "commitLogOffset": half_commit_offset,
                                          "commitOrRollback": 8})
        r = await c.call(RC.GET_MAX_OFFSET, {"topic": "durable", "queueId": 0})
        assert r.ext_fields["offset"] == "3"  # plain, delayed, committed: never the rolled back
        # both decisions are known after the restart: the check-back scan moves past them
        with trio.fail_after(5):
            while s2.broker.offsets.query(SCAN_GROUP, HALF_TOPIC, 0) != 2:  # noqa: ASYNC110
                await trio.sleep(0.1)
        await c.aclose()
        second.cancel_scope.cancel()
