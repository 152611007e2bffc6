"""Message ids and keys of the official C++ client (rocketmq-client-python 0.5.0rc2) found
through the key index: the client-generated message id (UNIQ_KEY, what send_sync returns) is
looked up the way Java's viewMessage / queryMessageByUniqKey ask (QUERY_MESSAGE with
`_UNIQUE_KEY_QUERY`), keys the way queryMessage asks; after the queue is indexed once, a
lookup reads only the messages it returns, whatever the queue's length.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.cpp_client import SendStatus, message, patiently, producer
from tests.rocketmq.remoting_client import RawClient

pytestmark = pytest.mark.integration

COUNT = 300


def by_id(msg_id: str) -> dict[str, object]:
    """QUERY_MESSAGE as Java's queryMessageByUniqKey sends it."""
    return {"topic": "ids", "key": msg_id, "maxNum": 32, "beginTimestamp": 0,
            "endTimestamp": 2**62, "_UNIQUE_KEY_QUERY": "true"}


async def test_lookup_by_client_message_id_and_key(stack: RocketMQStack) -> None:
    def produce() -> list[str]:
        p = producer(stack.name_server_addr, "PG_IDS")
        try:
            ids = []
            for i in range(COUNT):
                m = message("ids", f"body-{i}".encode(), "T", f"order-{i} batch-{i % 3}")
                r = patiently(partial(p.send_sync, m))
                assert r.status == SendStatus.OK
                ids.append(str(r.msg_id))
            return ids
        finally:
            p.shutdown()

    ids = await trio.to_thread.run_sync(produce)
    assert len(set(ids)) == COUNT
    partitions = stack.topics.topics()["ids"].partitions
    reads = 0
    originals = {}
    for q in range(partitions):
        plog = await stack.topics.partition("ids", q)
        original = plog.read
        originals[q] = (plog, original)

        async def counted(offset: int, max_bytes: int, _read=original) -> list[bytes]:
            nonlocal reads
            reads += 1
            return await _read(offset, max_bytes)

        plog.read = counted  # type: ignore[method-assign]
    c = await RawClient.connect(stack.broker_addr)
    try:
        first = await c.call(RC.QUERY_MESSAGE, by_id(ids[0]))
        assert first.code == ResponseCode.SUCCESS, first.remark
        assert [m.body for m in decode_stored_messages(first.body)] == [b"body-0"]
        reads = 0
        for i in range(1, COUNT, 7):
            r = await c.call(RC.QUERY_MESSAGE, by_id(ids[i]))
            assert r.code == ResponseCode.SUCCESS, (i, r.remark)
            (found,) = decode_stored_messages(r.body)
            assert found.body == f"body-{i}".encode()
            assert found.properties["UNIQ_KEY"] == ids[i]
        assert reads == len(range(1, COUNT, 7))  # one read per answer, no scan
        reads = 0
        missing = await c.call(RC.QUERY_MESSAGE, by_id("0A0B0C0D00002A9F0000000000000000"))
        assert missing.code == ResponseCode.QUERY_NOT_FOUND and reads == 0
        keyed = await c.call(RC.QUERY_MESSAGE, {"topic": "ids", "key": "order-42", "maxNum": 32,
                                                "beginTimestamp": 0, "endTimestamp": 2**62})
        assert [m.body for m in decode_stored_messages(keyed.body)] == [b"body-42"]
        shared = await c.call(RC.QUERY_MESSAGE, {"topic": "ids", "key": "batch-1", "maxNum": 5,
                                                 "beginTimestamp": 0, "endTimestamp": 2**62})
        assert len(decode_stored_messages(shared.body)) == 5
    finally:
        await c.aclose()
        for plog, original in originals.values():
            plog.read = original  # type: ignore[method-assign]
