"""A send answered from its append's completion is answered exactly once, whatever raises in
the completion callbacks: a bug in one of the steps (the partition log's indexing of a durable
batch, the managed ledger's record of an add) answers the client with an error instead of
leaving it waiting for ever (the callback's exception was logged by the write handle and
nothing answered the send, its slot never given back).  (A callback that raises while an
append fails at once is not called twice: tests/partition_log/test_append_soon_once.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext


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
