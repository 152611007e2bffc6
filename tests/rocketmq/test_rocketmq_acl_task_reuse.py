"""Each RocketMQ request is judged by its own signature, whatever task serves it.

A connection's request tasks park after answering and take the next request (bcd1411), and
plain sends are started in the connection's reading task (5f490d2): one task serves requests
of several principals in turn.  Nothing of an earlier request may carry over (a principal
remembered in a contextvar or on the task, an account or ACL decision cached per task): here
requests signed by an account allowed on a topic and by one refused on it alternate on one
connection, one at a time and pipelined, through both paths, and each is answered by its own
signer's rights."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.lowlevel

from protocols.rocketmq.acl import sign_request
from protocols.rocketmq.codec import encode_command, ext_str, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_acl_wire import acl_connection
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext

KEYS = {"alice-key": "alice-secret", "mallory-key": "mallory-secret"}
ACCOUNTS: list[dict[str, object]] = [
    {"access_key": "alice-key", "secret_key": KEYS["alice-key"], "topic_perms": ["vault=PUB|SUB"],
     "group_perms": ["cg=SUB"]},
    {"access_key": "mallory-key", "secret_key": KEYS["mallory-key"], "topic_perms": ["vault=DENY"],
     "group_perms": ["cg=SUB"]},
]
ALLOWED = {"alice-key": True, "mallory-key": False}


class Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.request_tasks = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if "RemotingConnection._serve" in task.name:
            self.request_tasks += 1


def _signed(code: int, ext: dict[str, object], body: bytes, who: str, opaque: int | None = None
            ) -> bytes:  # fmt: skip
    fields: dict[str, object] = {k: ext_str(v) for k, v in ext.items() if v is not None}
    sign_request(fields, body, who, KEYS[who])  # type: ignore[arg-type]
    return encode_command(make_request(code, fields, body, opaque=opaque))


def _request(kind: str, who: str, i: int) -> tuple[int, dict[str, object], bytes]:
    if kind == "send":  # answered from its completion, checked in the reading task
        return RC.SEND_MESSAGE_V2, send_ext("vault", {"TAGS": who}), f"{who}{i}".encode()
    return RC.PULL_MESSAGE, pull_ext("vault", 0, 0), b""  # a parked request task's


@pytest.fixture
async def client(stack: RocketMQStack) -> AsyncIterator[RawClient]:
    await stack.topics.create_topic("vault", 1)
    async with acl_connection(stack, ACCOUNTS) as c:
        yield c


def _allowed(code: int) -> bool:
    return code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND)


async def test_requests_of_two_principals_on_one_connection_are_each_judged_alone(
        client: RawClient) -> None:
    spawns = Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        served = 0
        order = ("alice-key", "mallory-key", "mallory-key", "alice-key")
        for i, (kind, who) in enumerate([(k, w) for _ in range(3) for k in ("pull", "send")
                                         for w in order]):
            code, ext, body = _request(kind, who, i)
            fields: dict[str, object] = {k: ext_str(v) for k, v in ext.items()}
            sign_request(fields, body, who, KEYS[who])  # type: ignore[arg-type]
            r = await client.call(code, fields, body)
            assert _allowed(r.code) == ALLOWED[who], (kind, who, r.code, r.remark)
            if not ALLOWED[who]:
                assert r.code == ResponseCode.NO_PERMISSION, r.remark
            served += kind == "pull" or not ALLOWED[who]  # a refused send: dispatch()'s
        reused = spawns.request_tasks < served  # one at a time: parked tasks took them
        # pipelined: requests of both signers in flight at once on the connection
        frames, expected = [], {}
        for i in range(40):
            who = ("alice-key", "mallory-key")[i % 3 == 0]
            kind = ("pull", "send")[i % 2]
            code, ext, body = _request(kind, who, i)
            frames.append(_signed(code, ext, body, who, opaque=7000 + i))
            expected[7000 + i] = (kind, who)
        await client.stream.send_all(b"".join(frames))
        with trio.fail_after(60):
            for _ in range(len(expected)):
                answer = await client.receive(wait_s=60)
                assert answer is not None and answer.is_response
                kind, who = expected.pop(answer.opaque)
                assert _allowed(answer.code) == ALLOWED[who], (kind, who, answer.remark)
        assert expected == {}
    finally:
        trio.lowlevel.remove_instrument(spawns)
    assert reused, f"{spawns.request_tasks} request tasks for {served} requests: none reused"
