"""The consumer offset a pull carries (sysFlag bit 0) is committed by the offsets' writer task,
after the pull was answered (gateway/rocketmq/service.py RocketMQOffsets.commit_soon): pending
offsets coalesce, a later synchronous commit wins, memory shows the last appended write, and
what is pending when the writer stops is still written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from gateway.rocketmq.service import RocketMQOffsets
from protocols.kafka.group_coordinator import CommittedOffset
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext


class GatedStore:
    """An offset store whose every commit waits for its own gate (opened by the test)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[tuple[str, int], int]]] = []
        self.gates: list[trio.Event] = []
        self.arrived = trio.Event()

    async def commit(self, group: str, offsets: Mapping[Any, CommittedOffset]) -> None:
        self.records.append((group, {k: v.offset for k, v in offsets.items()}))
        gate = trio.Event()
        self.gates.append(gate)
        self.arrived.set()
        await gate.wait()

    async def gate(self, index: int) -> trio.Event:
        """The gate of the index-th commit (0 = the first), once it has arrived."""
        while len(self.gates) <= index:
            self.arrived = trio.Event()
            await self.arrived.wait()
        return self.gates[index]


def offsets_on(store: GatedStore) -> RocketMQOffsets:
    return RocketMQOffsets(store)  # type: ignore[arg-type]


@asynccontextmanager
async def writer_running(store: GatedStore) -> AsyncIterator[tuple[RocketMQOffsets, trio.Nursery]]:
    """Offsets on `store` with their writer task started and waiting (10 s for the whole
    block); the writer is cancelled when the block ends."""
    offsets = offsets_on(store)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(offsets.write_soon_commits)
            await trio.testing.wait_all_tasks_blocked()
            yield offsets, nursery
            nursery.cancel_scope.cancel()


async def test_without_a_writer_the_caller_commits_itself() -> None:
    offsets = offsets_on(GatedStore())
    assert offsets.commit_soon("g", "t", 0, 5) is False
    assert offsets.query("g", "t", 0) is None


async def test_pending_offsets_coalesce_and_a_later_commit_wins() -> None:
    store = GatedStore()
    async with writer_running(store) as (offsets, nursery):
        assert offsets.commit_soon("g", "t", 0, 5)
        gate_5 = await store.gate(0)
        for offset in (7, 8, 9):  # while 5 is written: only the newest is kept
            assert offsets.commit_soon("g", "t", 0, offset)
        assert offsets.commit_soon("h", "t", 1, 40)
        assert offsets.query("g", "t", 0) is None  # nothing durable yet
        gate_5.set()
        for index in (1, 2):  # then the pending ones, one record per group
            (await store.gate(index)).set()
        await trio.testing.wait_all_tasks_blocked()
        assert offsets.query("g", "t", 0) == 9
        assert offsets.query("h", "t", 1) == 40
        assert sorted(store.records[1:]) == [("g", {("t", 0): 9}), ("h", {("t", 1): 40})]

        # a pending offset is replaced by a later synchronous commit (UPDATE_CONSUMER_OFFSET)
        assert offsets.commit_soon("g", "t", 2, 11)  # its write starts at once ...
        gate_11 = await store.gate(3)
        assert offsets.commit_soon("g", "t", 2, 12)  # ... this one waits behind it
        nursery.start_soon(offsets.commit, "g", "t", 2, 3)
        gate_3 = await store.gate(4)
        # the later write is released first: memory must still end at its offset
        gate_3.set()
        await trio.testing.wait_all_tasks_blocked()
        gate_11.set()
        await trio.testing.wait_all_tasks_blocked()
        assert offsets.query("g", "t", 2) == 3
        assert [r for r in store.records if ("t", 2) in r[1]] == [
            ("g", {("t", 2): 11}), ("g", {("t", 2): 3})]  # 12 was never written


async def test_what_is_pending_when_the_writer_stops_is_written() -> None:
    store = GatedStore()
    offsets = offsets_on(store)
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(offsets.write_soon_commits)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()  # the broker stops: the writer is not woken
                assert offsets.commit_soon("g", "t", 0, 5)  # ... before it saw this one

                async def release() -> None:
                    (await store.gate(0)).set()

                outer.start_soon(release)
            assert offsets.commit_soon("g", "t", 0, 7) is False  # no writer any more
    assert store.records == [("g", {("t", 0): 5})]
    assert offsets.query("g", "t", 0) == 5


async def test_a_pulls_commit_offset_is_committed_by_the_writer(stack: RocketMQStack) -> None:
    client = await RawClient.connect(stack.broker_addr)
    try:
        for i in range(3):
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("pc", {"TAGS": "x"}), b"m%d" % i)
            assert r.code == ResponseCode.SUCCESS, r.remark
        pull = {**pull_ext("pc", 0, 1, group="pcg"), "commitOffset": 1}
        pull["sysFlag"] = int(str(pull["sysFlag"])) | 0x1  # commit the offset it carries
        r = await client.call(RC.PULL_MESSAGE, pull)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["nextBeginOffset"] == "3"
        query = {"consumerGroup": "pcg", "topic": "pc", "queueId": 0}
        with trio.fail_after(10):
            while True:
                r = await client.call(RC.QUERY_CONSUMER_OFFSET, query)
                if r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "1":
                    break
                await trio.sleep(0.01)
    finally:
        await client.aclose()


class ClosingStore(GatedStore):
    """A gated store that refuses commits once closed (as a closed offset log does)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def commit(self, group: str, offsets: Mapping[Any, CommittedOffset]) -> None:
        assert not self.closed, "commit on a closed store"
        await super().commit(group, offsets)

    async def close(self) -> None:
        self.closed = True


async def test_after_close_the_writer_writes_nothing_more() -> None:
    """The broker closes its offsets before its background nursery stops the writer: close()
    writes what is pending, and what arrives after it is refused (the caller's own commit
    meets the closed store) instead of the stopping writer writing to a closed store."""
    store = ClosingStore()
    async with writer_running(store) as (offsets, nursery):
        assert offsets.commit_soon("g", "t", 0, 5)

        async def open_gates() -> None:
            (await store.gate(0)).set()

        nursery.start_soon(open_gates)
        await offsets.close()
        assert store.records == [("g", {("t", 0): 5})]
        assert offsets.commit_soon("g", "t", 0, 6) is False
    assert store.records == [("g", {("t", 0): 5})]
