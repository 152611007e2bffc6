"""Forwarding a moved bundle's per-queue requests to its owner (gateway/rocketmq/forwarding.py),
over real sockets against a remoting server that stands in for the owner."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from gateway.rocketmq.forwarding import (
    FORWARDED_REMARK,
    BundleRequestRouter,
    RequestForwarder,
)
from gateway.rocketmq.listener import _serve_remoting
from protocols.rocketmq.codec import (
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    make_request,
    make_response,
)
from protocols.rocketmq.errors import NoPermissionError, ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.support.standalone import free_port


class Conn:
    peer = ("127.0.0.1", 1)
    connection_id = 1

    def send_request(self, command: RemotingCommand) -> bool:
        return False


async def owner(nursery: trio.Nursery, seen: list[RemotingCommand]) -> str:
    """A remoting server answering every request SUCCESS, echoing what it got."""

    async def handle(conn: Any, request: RemotingCommand) -> RemotingCommand:
        seen.append(request)
        return make_response(request, ResponseCode.SUCCESS, "owner",
                             {"queueOffset": 7, "got": request.ext_fields.get("topic")},
                             body=request.body[::-1])

    address = await nursery.start(lambda task_status: _serve_remoting(
        "owner", handle, "127.0.0.1", 0, max_frame_bytes=1 << 20, max_header_bytes=1 << 16,
        task_status=task_status))
    return f"127.0.0.1:{address.port}"


def router(forwarder: RequestForwarder, owners: dict[int, str], *, local: bool = False,
           acl: Any = None) -> BundleRequestRouter:
    changed = trio.Event()
    return BundleRequestRouter(3, forwarder, lambda b: local, owners.get, "127.0.0.1:1",
                               lambda: changed, acl=acl)


async def test_send_and_pull_reach_the_owner_under_the_clients_opaque(
        nursery: trio.Nursery) -> None:
    seen: list[RemotingCommand] = []
    address = await owner(nursery, seen)
    forwarder = RequestForwarder(1 << 20)
    await nursery.start(forwarder.run)
    r = router(forwarder, {3: address})
    for code, ext in [(RC.SEND_MESSAGE_V2, {"b": "T", "e": 1}),
                      (RC.PULL_MESSAGE, {"topic": "T", "suspendTimeoutMillis": 100})]:
        for serialize in (0, SERIALIZE_ROCKETMQ):
            request = make_request(code, ext, b"abc", serialize_type=serialize, opaque=4242)
            answer = await r.route(Conn(), request)
            assert answer is not None
            assert answer.is_response and answer.opaque == 4242
            assert answer.code == ResponseCode.SUCCESS and answer.body == b"cba"
            assert answer.ext_fields["queueOffset"] == "7"
            assert answer.serialize_type == serialize
            relayed = seen[-1]
            assert relayed.code == code and relayed.body == b"abc"
            assert relayed.remark == FORWARDED_REMARK and relayed.opaque != 4242
            assert relayed.ext_fields == request.ext_fields  # a signature still matches
    # one connection serves them all
    assert len({id(p) for p in forwarder._peers.values()}) == 1


async def test_what_is_not_forwarded(nursery: trio.Nursery, autojump_clock: Any) -> None:
    seen: list[RemotingCommand] = []
    address = await owner(nursery, seen)
    forwarder = RequestForwarder(1 << 20)
    await nursery.start(forwarder.run)
    send = make_request(RC.SEND_MESSAGE, {"topic": "T"}, b"x")
    # served here: local handlers answer
    assert await router(forwarder, {3: address}, local=True).route(Conn(), send) is None
    # not a per-queue request
    heartbeat = make_request(RC.HEART_BEAT, {}, b"{}")
    assert await router(forwarder, {3: address}).route(Conn(), heartbeat) is None
    # already forwarded once: never again (no loops between brokers that disagree)
    again = make_request(RC.SEND_MESSAGE, {"topic": "T"}, b"x")
    again.remark = FORWARDED_REMARK
    assert await router(forwarder, {3: address}).route(Conn(), again) is None

    # refused by this door's ACL: dispatch answers the refusal, nothing leaves
    class Refuse:
        def check(self, conn: Any, request: RemotingCommand, broker: Any = None) -> None:
            raise NoPermissionError("no")

    assert await router(forwarder, {3: address}, acl=Refuse()).route(Conn(), send) is None
    # no owner known within the wait
    start = trio.current_time()
    assert await router(forwarder, {}).route(Conn(), send) is None
    assert 1.4 <= trio.current_time() - start <= 2.0
    assert seen == []


async def test_an_unreachable_owner_falls_back_to_the_local_answer(
        nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    forwarder = RequestForwarder(1 << 20)
    await nursery.start(forwarder.run)
    send = make_request(RC.SEND_MESSAGE, {"topic": "T"}, b"x")
    with caplog.at_level(logging.WARNING, "ledgerwire.rocketmq.forwarding"):
        assert await router(forwarder, {3: f"127.0.0.1:{free_port()}"}).route(Conn(), send) \
            is None
    assert "forwarding request 10" in caplog.text
    assert not [r for r in caplog.records if r.exc_info]


async def test_an_owner_found_during_the_wait_gets_the_request(nursery: trio.Nursery) -> None:
    seen: list[RemotingCommand] = []
    address = await owner(nursery, seen)
    forwarder = RequestForwarder(1 << 20)
    await nursery.start(forwarder.run)
    owners: dict[int, str] = {}
    changed = [trio.Event()]
    r = BundleRequestRouter(3, forwarder, lambda b: False, owners.get, "127.0.0.1:1",
                            lambda: changed[0])

    async def move() -> None:
        await trio.sleep(0.2)
        owners[3] = address
        old, changed[0] = changed[0], trio.Event()
        old.set()

    nursery.start_soon(move)
    answer = await r.route(Conn(), make_request(RC.SEND_MESSAGE, {"topic": "T"}, b"x",
                                                opaque=9))
    assert answer is not None and answer.opaque == 9 and len(seen) == 1
