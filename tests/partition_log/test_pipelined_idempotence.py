"""Pipelined idempotent batches: up to 5 per producer and partition are appended before the
first is durable, acknowledged only once durable, and a failure among them never turns into a
lost or doubled batch.

The partition log judges a batch against the producer's last *appended* batch (not the last
durable one), so a producer's next batch joins the same journal group commits as the ones still
in flight.  What that must not break:

- a retry of a batch still in flight is answered only once that batch is durable, with its
  original offset, and is not stored again;
- when an append fails (a bookie error, the ledger fenced by a new owner), the batches after it
  fail too, and the client's retries of every unacknowledged sequence are taken on the log
  reopened from what is durable: each batch ends up stored exactly once, in sequence order, and
  a duplicate answer always names the offset where the batch really is.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from ledger_backend.client.errors import BKTimeoutError
from ledger_backend.client.memory import MemoryWriteHandle
from protocols.kafka import record_batch as rb
from protocols.kafka.errors import KafkaProtocolError, OutOfOrderSequenceError

PID = 7


def batch(seq: int, *values: bytes) -> bytes:
    return rb.build_batch([(None, v) for v in values], producer_id=PID, producer_epoch=0,
                          base_sequence=seq)


def stored_values(batches: list[bytes]) -> list[bytes | None]:
    return [r.value for b in batches for r in rb.decode_records(b)]


async def test_pipelined_batches_and_a_retry_of_one_in_flight(
        make_broker, monkeypatch: pytest.MonkeyPatch) -> None:
    acks = trio.Event()  # the bookies' acknowledgements are held back until this is set
    real_append = MemoryWriteHandle.append

    async def slow_ack_append(self: MemoryWriteHandle, data: bytes) -> int:
        entry_id = await real_append(self, data)
        await acks.wait()
        return entry_id

    monkeypatch.setattr(MemoryWriteHandle, "append", slow_ack_append)
    broker = await make_broker()
    await broker.topics.create_topic("pipe", 1)
    plog = await broker.topics.partition("pipe", 0)
    answers: dict[str, int] = {}

    async def send(name: str, data: bytes) -> None:
        answers[name] = (await plog.append(data)).base_offset
        # acknowledged only once durable: the high watermark covers the batch
        assert plog.high_watermark > answers[name]

    async with trio.open_nursery() as nursery:
        for seq in range(5):
            nursery.start_soon(send, f"b{seq}", batch(seq, b"v%d" % seq))
            await trio.testing.wait_all_tasks_blocked()
        # all five took their offsets while none is durable: the sequence follows the last
        # appended batch
        assert answers == {} and plog.high_watermark == 0
        assert plog.producer_state.producers[PID].last_seq == 4
        nursery.start_soon(send, "retry of b2", batch(2, b"v2"))
        await trio.testing.wait_all_tasks_blocked()
        assert answers == {}  # not before b2 is durable
        with pytest.raises(OutOfOrderSequenceError):  # overlaps b3..b4 without matching one
            await plog.append(batch(3, b"x", b"y", b"z"))
        nursery.start_soon(send, "b5", batch(5, b"v5"))
        await trio.testing.wait_all_tasks_blocked()
        acks.set()
    assert answers == {"b0": 0, "b1": 1, "b2": 2, "b3": 3, "b4": 4, "b5": 5, "retry of b2": 2}
    plog._cache.clear()
    assert stored_values(await plog.read(0, 1 << 20)) == [b"v%d" % i for i in range(6)]


@pytest.mark.parametrize("failure", ["bookie error", "fenced by a new owner"])
async def test_a_failure_among_pipelined_batches_then_the_clients_retries(
        make_broker, bookkeeper, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    real_append = MemoryWriteHandle.append

    async def failing_append(self: MemoryWriteHandle, data: bytes) -> int:
        if b"FAIL" in data:  # from this add on, every add fails (as a real ledger's would)
            if failure == "bookie error":
                bookkeeper.cluster.fail_appends_with = BKTimeoutError("injected: no answer")
            else:  # another broker's recovery fenced the ledger just before this add
                self._ledger.fenced = True
        return await real_append(self, data)

    monkeypatch.setattr(MemoryWriteHandle, "append", failing_append)
    broker = await make_broker()
    await broker.topics.create_topic("fail", 1)
    plog = await broker.topics.partition("fail", 0)
    values = [b"v0", b"v1", b"v2 FAIL", b"v3", b"v4"]
    outcomes: dict[int, Any] = {}

    async def send(seq: int) -> None:
        try:
            outcomes[seq] = (await plog.append(batch(seq, values[seq]))).base_offset
        except KafkaProtocolError as exc:
            outcomes[seq] = exc

    async with trio.open_nursery() as nursery:
        for seq in range(5):
            nursery.start_soon(send, seq)
            await trio.testing.wait_all_tasks_blocked()
    for seq in (2, 3, 4):  # the failed batch and every one after it
        assert isinstance(outcomes[seq], KafkaProtocolError), outcomes
        assert outcomes[seq].code.retriable, outcomes[seq]
    acked = {seq: offset for seq, offset in outcomes.items() if isinstance(offset, int)}

    # The client retries every unacknowledged batch, in order, where the partition is served now.
    bookkeeper.cluster.fail_appends_with = None
    values[2] = b"v2"  # (the marker only chose the failing add)
    if failure == "bookie error":
        served = broker
    else:
        served = await make_broker()  # the new owner
    fresh = await served.topics.partition("fail", 0)
    retried: dict[int, int] = {}
    with trio.fail_after(30):  # (a retry taken for a batch that is not stored would hang)
        for seq in range(5):
            if seq not in acked:
                retried[seq] = (await fresh.append(batch(seq, values[seq]))).base_offset
        retried[1] = (await fresh.append(batch(1, values[1]))).base_offset  # a late duplicate
    fresh._cache.clear()
    stored = [(rb.parse_header(b), stored_values([b])[0]) for b in await fresh.read(0, 1 << 20)]
    # each batch exactly once, in sequence order, the failed one's retry included
    assert [(h.base_sequence, v) for h, v in stored] == [
        (0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3"), (4, b"v4")]
    where = {h.base_offset: h.base_sequence for h, _ in stored}
    for seq, offset in {**acked, **retried}.items():  # every answer names where it is stored
        assert where[offset] == seq, (seq, offset, where)
