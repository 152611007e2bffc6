"""A send answered from its append's completion is answered exactly once, whatever raises in
the completion callbacks: a bug in one of the steps (the partition log's indexing of a durable
batch, the managed ledger's record of an add) answers the client with an error instead of
leaving it waiting for ever (the callback's exception was logged by the write handle and
nothing answered the send, its slot never given back); an expected fault (the bookie lost)
is answered with a code clients retry, without a traceback.  (A callback that raises while an
append fails at once is not called twice: tests/partition_log/test_append_soon_once.py.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from gateway.rocketmq import listener
from ledger_backend.bookie import local_bookies
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq import dispatch
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack, durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.rocketmq.test_rocketmq_send_at_once import StepCounter


class StepBug(RuntimeError):
    pass


@pytest.mark.parametrize("step", ["partition log", "managed ledger"])
async def test_a_bug_in_a_completion_step_is_answered(
        store: MetadataStore, tmp_path: Path, step: str) -> None:
    async with durable_stack(store, tmp_path / "bookie", fsync=False, timeout_s=10) as stack:
        client = await RawClient.connect(stack.broker_addr)
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("bug", {"TAGS": "t"}), b"open")
        assert r.code == ResponseCode.SUCCESS, r.remark
        plog: Any = await stack.topics.partition("bug", 0)
        owner, name = (plog, "_appended") if step == "partition log" else \
            (plog.ledger, "_added")  # fmt: skip
        real = getattr(owner, name)
        bugs: list[str] = []

        def buggy(*args: Any) -> Any:
            if not bugs:
                bugs.append(name)
                raise StepBug(f"{name} failed")
            return real(*args)

        setattr(owner, name, buggy)
        with trio.fail_after(30):
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("bug", {"TAGS": "t"}), b"x",
                                  wait_s=30)
        assert bugs == [name]  # the completion path met the bug
        assert r is not None and r.code != ResponseCode.SUCCESS, r
        with trio.fail_after(30):  # the connection still serves (its slot was given back)
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("bug", {"TAGS": "t"}), b"y",
                                  wait_s=30)
        assert r is not None and r.code == ResponseCode.SUCCESS, r
        await client.aclose()


@pytest.mark.parametrize("path", ["completion", "task"])
async def test_a_send_whose_bookie_is_lost_is_answered_retryable_without_a_traceback(
        store: MetadataStore, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The queue's only bookie stops answering while a send is in flight (answered from its
    completion, or by a request task): the add times out (no bookie can replace it), and the
    client gets SERVICE_NOT_AVAILABLE, which producers retry, as docs/faults.md says (both
    answered SYSTEM_ERROR before: the handler's StorageError hid the fault from dispatch); every
    layer logs the expected fault without a traceback and nothing logs an ERROR; the
    connection's slot is given back (the next request on it is answered)."""
    if path == "task":
        monkeypatch.setattr(dispatch, "_STARTS_AT_ONCE", frozenset())
    async with durable_stack(store, tmp_path / "bookie", fsync=False, timeout_s=1) as stack:
        client = await RawClient.connect(stack.broker_addr)
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("lost", {"TAGS": "t"}), b"open")
        assert r.code == ResponseCode.SUCCESS, r.remark
        plog: Any = await stack.topics.partition("lost", 0)
        address = plog.ledger._current.handle.metadata.current_ensemble[0]
        server = local_bookies.lookup(address)
        assert server is not None
        counter = StepCounter()
        caplog.set_level(logging.INFO)
        local_bookies.unregister(address, server)
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(60):
                r = await client.call(RC.SEND_MESSAGE_V2, send_ext("lost", {"TAGS": "t"}),
                                      b"x", wait_s=60)
        finally:
            trio.lowlevel.remove_instrument(counter)
            local_bookies.register(address, server)
        assert r is not None and r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r
        served = [name for name in counter.steps if "RemotingConnection._serve" in name]
        assert bool(served) == (path == "task"), served
        with trio.fail_after(60):
            r = await client.call(RC.GET_MAX_OFFSET, {"topic": "lost", "queueId": 0},
                                  wait_s=60)
        assert r is not None
        loud = [(rec.name, rec.levelname, rec.getMessage()) for rec in caplog.records
                if rec.exc_info is not None or rec.levelno >= logging.ERROR]
        assert loud == []
        await client.aclose()


async def test_a_bug_in_starting_a_send_ends_neither_the_connection_nor_the_listener(
        stack: RocketMQStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """start_request runs in the connection's reading task (the ACL check and the send's
    synchronous part), outside the request tasks' guard: an exception there ended the read
    loop, and with it the listener's connections nursery, every connection of the broker.
    Now the request is answered by the task path, which answers a bug SYSTEM_ERROR."""
    client = await RawClient.connect(stack.broker_addr)
    r = await client.call(RC.SEND_MESSAGE_V2, send_ext("start", {"TAGS": "t"}), b"first")
    assert r.code == ResponseCode.SUCCESS, r.remark

    def buggy_start(*args: Any) -> bool:
        raise StepBug("start_request failed")

    monkeypatch.setattr(listener, "start_request", buggy_start)
    with trio.fail_after(30):
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("start", {"TAGS": "t"}), b"x",
                              wait_s=30)
    assert r is not None and r.code == ResponseCode.SUCCESS, r  # the task path stored it
    monkeypatch.undo()
    other = await RawClient.connect(stack.broker_addr)
    with trio.fail_after(30):
        r = await other.call(RC.SEND_MESSAGE_V2, send_ext("start", {"TAGS": "t"}), b"y",
                             wait_s=30)
    assert r is not None and r.code == ResponseCode.SUCCESS, r
    await other.aclose()
    await client.aclose()
