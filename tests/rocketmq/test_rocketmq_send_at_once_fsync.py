"""A send answered from its append's completion (no task of its own: the listener's
start_request path, PartitionLog.append_built_soon, ManagedLedger.append_soon,
WriteHandle.append_soon, the in-process bookie's start_add) is answered only after the
journal's fdatasync of its entry returned, never when the entry was merely written or handed
to the journal.  The journal's fdatasync is slowed down here (it sleeps before syncing) so that
an answer sent any earlier would arrive while it sleeps."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

import ledger_backend.bookie.journal_files as journal_files
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.codec import encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.rocketmq.test_rocketmq_send_at_once import StepCounter


class SlowSyncOs:
    """journal_files's `os`: fdatasync sleeps first, and counts the syncs that returned."""

    def __init__(self) -> None:
        self.synced = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fdatasync(self, fd: int) -> None:
        time.sleep(0.05)
        os.fdatasync(fd)
        self.synced += 1


async def test_a_send_is_answered_only_after_its_journal_fsync(
        store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with durable_stack(store, tmp_path / "bookie", fsync=True, timeout_s=30) as stack:
        client = await RawClient.connect(stack.broker_addr)
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("synced", {"TAGS": "t"}), b"open")
        assert r.code == ResponseCode.SUCCESS, r.remark  # the queue's log is open now
        slow = SlowSyncOs()
        monkeypatch.setattr(journal_files, "os", slow)
        counter = StepCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            for i in range(10):  # one at a time: each answer needs a sync that began after it
                before = slow.synced
                r = await client.call(RC.SEND_MESSAGE_V2, send_ext("synced", {"TAGS": "t"}),
                                      f"m{i}".encode())
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert slow.synced > before, f"send {i} answered before its journal fsync"
            # pipelined: the n-th answer needs at least one sync; all of them, one each group
            frames = b"".join(encode_command(make_request(
                RC.SEND_MESSAGE_V2, send_ext("synced", {"TAGS": "t"}), f"p{i}".encode(),
                opaque=5000 + i)) for i in range(20))
            before = slow.synced
            await client.stream.send_all(frames)
            with trio.fail_after(60):
                for _ in range(20):
                    answer = await client.receive(wait_s=60)
                    assert answer is not None and answer.code == ResponseCode.SUCCESS
                    assert slow.synced > before, "a pipelined send answered before any fsync"
        finally:
            trio.lowlevel.remove_instrument(counter)
        served = {name: n for name, n in counter.steps.items()
                  if "RemotingConnection._serve" in name}
        assert served == {}, f"sends took the task path, not the completion path: {served}"
        await client.aclose()
