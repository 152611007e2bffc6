"""The listener's write path: vectored sends, coalesced answers, the idle/write watchdog,
and ConnectionOrder's bookkeeping."""

from __future__ import annotations

import os

import trio
import trio.lowlevel

from gateway.kafka.reply_sending import sendmsg_all
from protocols.kafka.handlers.request_order import FETCH, PRODUCE, ConnectionOrder
from protocols.kafka.record_batch import build_batch
from tests.kafka_server.conftest import running_stack
from tests.kafka_server.test_kafka_handlers_wire import (
    API_VERSIONS,
    create_topic,
    fetch_body,
    fetched_records,
)
from tests.kafka_server.test_kafka_handlers_wire import (
    FETCH as FETCH_KEY,
)
from tests.kafka_server.test_kafka_handlers_wire import (
    PRODUCE as PRODUCE_KEY,
)
from tests.kafka_server.test_kafka_listener import VERSIONS_BODY, produce_body


async def testsendmsg_all_survives_partial_writes_in_order() -> None:
    left, right = trio.socket.socketpair()
    buffers = [os.urandom(n) for n in (1, 70_000, 3, 900_000, 0, 250_000)] * 300  # > IOV batch
    expected = b"".join(buffers)
    got = bytearray()

    async def read_slowly() -> None:
        while len(got) < len(expected):
            got.extend(await right.recv(1 << 20))
            await trio.lowlevel.checkpoint()

    with left, right:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_slowly)
            await sendmsg_all(left, list(buffers))
    assert bytes(got) == expected


async def test_sendmsg_all_to_a_gone_peer_or_a_closed_socket_is_a_broken_resource() -> None:
    left, right = trio.socket.socketpair()
    right.close()
    try:
        await sendmsg_all(left, [b"x" * 10])  # the first write, tried without a yield
    except trio.BrokenResourceError:
        pass
    else:
        raise AssertionError("a write to a gone peer succeeded")
    left.close()
    try:
        await sendmsg_all(left, [b"x"])
    except trio.ClosedResourceError:
        pass
    else:
        raise AssertionError("a write to a closed socket succeeded")


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_a_lone_produce_costs_few_task_steps() -> None:
    """Task steps are exact where timings on a shared machine are not.  This test's client
    included, a lone produce took 9; 8 since the writer's first sendmsg does not yield to the
    scheduler after a write the socket took at once; 7 since a Produce whose turn has come
    takes no checkpoint before its append."""
    async with running_stack() as stack:
        async with await stack.client() as client:
            await create_topic(client, "steps")
            batch = build_batch([(b"k", b"v" * 100)])
            for _ in range(3):  # the partition opened, its first ledger created
                await client.request(PRODUCE_KEY, 9, produce_body("steps", batch))
            counter = StepCounter()
            trio.lowlevel.add_instrument(counter)
            try:
                for _ in range(40):
                    answer = await client.request(PRODUCE_KEY, 9, produce_body("steps", batch))
                    partition = answer["responses"][0]["partition_responses"][0]
                    assert partition["error_code"] == 0
            finally:
                trio.lowlevel.remove_instrument(counter)
    per_produce = counter.steps / 40
    assert per_produce < 8, f"{per_produce:.1f} task steps per produce"


async def test_many_pipelined_answers_arrive_whole_and_in_order() -> None:
    async with running_stack() as stack:
        async with await stack.client() as client:
            await create_topic(client, "coal")
            big = build_batch([(b"k", os.urandom(40_000))])
            for i in range(100):
                if i % 2:
                    await client.send(API_VERSIONS, 3, VERSIONS_BODY)
                else:
                    await client.send(PRODUCE_KEY, 9, produce_body("coal", big))
            offsets = []
            for i in range(100):
                _, answer = await client.receive()  # asserts correlation order
                if not i % 2:
                    partition = answer["responses"][0]["partition_responses"][0]
                    assert partition["error_code"] == 0
                    offsets.append(partition["base_offset"])
            assert offsets == sorted(offsets) and len(set(offsets)) == 50
            fetched = await client.request(FETCH_KEY, 11, fetch_body("coal", 0))
            assert len(fetched_records(fetched["responses"][0]["partitions"][0])) >= 1


async def test_an_idle_connection_is_closed_by_the_watchdog() -> None:
    async with running_stack(idle_timeout_s=0.4) as stack:
        client = await stack.client()
        try:
            started = trio.current_time()
            assert await client.closed_by_server(timeout_s=5)
            assert 0.35 <= trio.current_time() - started < 2.0
        finally:
            await client.aclose()


async def test_a_long_request_keeps_an_idle_connection_open() -> None:
    async with running_stack(idle_timeout_s=0.3) as stack:
        async with await stack.client() as client:
            await create_topic(client, "slowpoll")
            started = trio.current_time()
            answer = await client.request(
                FETCH_KEY, 11, fetch_body("slowpoll", 0, max_wait_ms=1000, min_bytes=1))
            assert trio.current_time() - started >= 0.9
            assert answer["responses"][0]["partitions"][0]["error_code"] == 0
            # Still open right after the answer: a request keeps it alive.
            assert (await client.request(API_VERSIONS, 3, VERSIONS_BODY))["error_code"] == 0


def test_connection_order_waits_and_prunes() -> None:
    order = ConnectionOrder()
    metadata = order.admit(3)
    produces = [order.admit(PRODUCE) for _ in range(100)]
    # A Produce waits for the earlier non-Produce only, and for the previous Produce's append.
    assert produces[0]._waits == [metadata.done]
    assert produces[1]._previous_append is produces[0].issued
    assert order.admit(FETCH)._waits == []
    metadata.finished()
    for turn in produces[:90]:
        turn.finished()
    later = order.admit(PRODUCE)
    assert later._waits == []
    other = order.admit(19)  # waits for every unfinished earlier request
    assert set(map(id, other._waits)) == {id(t.done) for t in [*produces[90:], later]}
    assert len(order._produces) <= 32  # finished Produces are pruned
