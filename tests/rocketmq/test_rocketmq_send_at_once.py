"""Sends answered from their append's completion, without a task of their own (the listener's
start_request path, PartitionLog.append_built_soon, ManagedLedger.append_soon): on the durable
backend as `ledgerwire standalone` runs it, answered only once stored, in queue order, across
ledger rollovers, and with the async path's error answer when the append fails.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio
import trio.lowlevel

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.codec import encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] = self.steps.get(task.name, 0) + 1


async def test_pipelined_sends_across_rollovers_are_stored_in_order(
        store: MetadataStore, tmp_path: Path) -> None:
    """60 sends written at once on one connection, to a queue whose ledger rolls over every 4
    entries: each is answered SUCCESS, with an offset where the queue holds its body (requests
    in flight at once on a connection are stored in the order they reach the log, with or
    without this path), and every ledger but the last is closed (a retired ledger whose last
    add was answered without a task is still finished)."""
    async with durable_stack(store, tmp_path / "bookie", fsync=True, timeout_s=30) as stack:
        stack.topics.config = dataclasses.replace(stack.topics.config, max_entries_per_ledger=4)
        client = await RawClient.connect(stack.broker_addr)
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("roll", {"TAGS": "t"}), b"first")
        assert r.code == ResponseCode.SUCCESS, r.remark
        frames = b"".join(encode_command(make_request(
            RC.SEND_MESSAGE_V2, send_ext("roll", {"TAGS": "t"}), f"m{i}".encode(),
            opaque=1000 + i)) for i in range(60))
        await client.stream.send_all(frames)
        offsets: dict[int, int] = {}
        with trio.fail_after(60):
            while len(offsets) < 60:
                answer = await client.receive(wait_s=60)
                assert answer is not None and answer.is_response
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                offsets[answer.opaque - 1000] = int(answer.ext_fields["queueOffset"])
        assert sorted(offsets.values()) == list(range(1, 61))
        plog = await stack.topics.partition("roll", 0)
        assert plog.high_watermark == 61
        stored = {r.offset: r.value for batch in await plog.read(0, 1 << 20)
                  for r in _records(batch)}
        assert stored == {0: b"first", **{o: f"m{i}".encode() for i, o in offsets.items()}}
        with trio.fail_after(30):  # the last retired ledger is finished by a system task
            while not all(r.closed for r in plog.ledger.ledgers[:-1]):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert len(plog.ledger.ledgers) >= 15
        await client.aclose()


def _records(batch: bytes) -> list:  # type: ignore[type-arg]
    from protocols.kafka.record_batch import decode_records
    return list(decode_records(batch))


async def test_plain_sends_take_no_request_task(store: MetadataStore, tmp_path: Path) -> None:
    """A plain send on the durable backend is answered from its append's completion: in 30
    sends no listener request task takes a step (one took two steps per send before)."""
    async with durable_stack(store, tmp_path / "bookie", fsync=False) as stack:
        client = await RawClient.connect(stack.broker_addr)
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("plain", {"TAGS": "t"}), b"x")
        assert r.code == ResponseCode.SUCCESS, r.remark
        counter = StepCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            for i in range(30):
                r = await client.call(RC.SEND_MESSAGE_V2, send_ext("plain", {"TAGS": "t"}),
                                      b"y")
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert int(r.ext_fields["queueOffset"]) == i + 1
        finally:
            trio.lowlevel.remove_instrument(counter)
        request_tasks = {name: n for name, n in counter.steps.items()
                         if "RemotingConnection._serve" in name}
        assert request_tasks == {}, request_tasks
        await client.aclose()


async def test_a_send_whose_ledger_was_fenced_is_refused(store: MetadataStore,
                                                        tmp_path: Path) -> None:
    """Another client recovers (fences) the queue's ledger: the next send, answered from its
    append's completion, is refused with the async path's answer (not SUCCESS, naming the new
    owner), and nothing is acknowledged that the ledger does not hold."""
    async with durable_stack(store, tmp_path / "bookie", fsync=False) as stack:
        client = await RawClient.connect(stack.broker_addr)
        for _ in range(3):
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("fenced", {"TAGS": "t"}), b"x")
            assert r.code == ResponseCode.SUCCESS, r.remark
        plog = await stack.topics.partition("fenced", 0)
        ledger_id = plog.ledger.current_ledger_id
        async with BookKeeper(store, timeout_s=10, local_bookies=True) as other:
            handle = await other.open_ledger(ledger_id, recovery=True)
            assert handle.metadata.last_entry_id == 2
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("fenced", {"TAGS": "t"}), b"late")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r.remark  # retried by clients
        assert "owned elsewhere" in (r.remark or ""), r.remark
        assert plog.high_watermark == 3
        await client.aclose()
