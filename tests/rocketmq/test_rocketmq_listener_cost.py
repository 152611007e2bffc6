"""What the broker listener costs per request: Trio task steps per send, and frame integrity
when responses written by request tasks race broker-initiated requests on one connection.

On this Python broker a send's CPU cost is dominated by scheduler work, so the number of task
steps per request is the figure to keep down (it is exact, unlike timings on a shared machine).
"""

from __future__ import annotations

import json

import trio
import trio.lowlevel

from gateway.rocketmq.remoting_connection import RemotingConnection
from protocols.rocketmq.codec import encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext

SENDS = 40


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_a_send_costs_few_task_steps(stack: RocketMQStack) -> None:
    client = await RawClient.connect(stack.broker_addr)
    for _ in range(3):  # topic creation, partition open, first ledger: not what is measured
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext("steps", {"TAGS": "t"}), b"x" * 100)
        assert r.code == ResponseCode.SUCCESS, r.remark
    counter = StepCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        for _ in range(SENDS):
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("steps", {"TAGS": "t"}),
                                  b"x" * 100)
            assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        trio.lowlevel.remove_instrument(counter)
    per_send = counter.steps / SENDS
    # This test's client steps included. With a scheduler round trip to take the request slot
    # and a hand-over of every response to the writer task it was 8 on the in-memory stack;
    # then 6; 5 since a response the socket takes at once is written without send_all's
    # trailing checkpoint.
    assert per_send < 6, f"{per_send:.1f} task steps per send"
    await client.aclose()


class SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)


async def test_requests_reuse_parked_tasks(stack: RocketMQStack) -> None:
    """A task that answered a request takes the connection's next one: sends one after another
    create no task (they created one each)."""
    client = await RawClient.connect(stack.broker_addr)
    r = await client.call(RC.SEND_MESSAGE_V2, send_ext("reuse", {"TAGS": "t"}), b"x" * 100)
    assert r.code == ResponseCode.SUCCESS, r.remark
    counter = SpawnCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        for _ in range(SENDS):
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("reuse", {"TAGS": "t"}),
                                  b"x" * 100)
            assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        trio.lowlevel.remove_instrument(counter)
    listener_tasks = [name for name in counter.spawned if "rocketmq.listener" in name]
    assert listener_tasks == [], listener_tasks  # one per send before
    await client.aclose()


async def test_responses_and_broker_requests_never_interleave(stack: RocketMQStack) -> None:
    """Responses are written by request tasks (socket idle) or queued for the writer task,
    which also sends broker-initiated requests: every frame arrives whole."""
    client = await RawClient.connect(stack.broker_addr)
    hb = {"clientID": "A", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg-mixed", "consumeType": "CONSUME_PASSIVELY", "messageModel": 1,
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "mixed", "subString": "*"}]}]}
    r = await client.call(RC.HEART_BEAT, body=json.dumps(hb).encode())
    assert r.code == ResponseCode.SUCCESS
    [conn] = stack.broker.clients.consumer_connections("cg-mixed")
    big = b"y" * 200_000  # large frames make partial writes (and so interleaving) likely

    async def broker_pushes() -> None:
        for i in range(30):
            assert conn.send_request(make_request(RC.NOTIFY_CONSUMER_IDS_CHANGED,
                                                  {"consumerGroup": f"g{i}"}, big, oneway=True))
            await trio.lowlevel.checkpoint()

    async def sends() -> None:
        stream = client.stream
        for i in range(30):
            await stream.send_all(encode_command(make_request(
                RC.SEND_MESSAGE_V2, send_ext("mixed", {"TAGS": "t"}), big, opaque=10_000 + i)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker_pushes)
        nursery.start_soon(sends)
        responses = 0
        notifications = 0
        with trio.fail_after(30):
            while responses < 30:
                command = await client.receive(wait_s=30)
                assert command is not None
                if command.is_response:
                    assert command.code == ResponseCode.SUCCESS, command.remark
                    responses += 1
                else:
                    assert command.code == RC.NOTIFY_CONSUMER_IDS_CHANGED
                    notifications += command.body == big
        while notifications < 30:
            command = await client.receive(wait_s=30)
            assert command is not None and not command.is_response
            notifications += command.body == big
    await client.aclose()


def test_receive_buffers_stay_below_the_mmap_threshold() -> None:
    """socket.recv(n) allocates n bytes before it knows how many arrive; from glibc's mmap
    threshold (128 KiB) on, every call pays an mmap + munmap (~4 us, measured: more than the
    rest of a 1 KB read).  A send crosses all three of these reads."""
    from gateway.rocketmq import remoting_connection
    from ledger_backend.bookie import server
    from ledger_backend.client import bookie_client

    for size in (remoting_connection.RECEIVE_BYTES, server._RECEIVE_BYTES,
                 bookie_client._RECEIVE_BYTES):
        assert 16 * 1024 <= size < 128 * 1024


async def test_a_response_the_socket_cannot_take_at_once_arrives_whole() -> None:
    """The write without a checkpoint takes what the socket buffer holds; send_all writes the
    rest once the peer reads, and a response to a peer that has gone breaks the connection
    instead of raising out of the request's task."""
    a, b = trio.socket.socketpair()
    server, peer = trio.SocketStream(a), trio.SocketStream(b)
    conn = RemotingConnection(server, 8 << 20, 64 << 10)
    frame = bytes(range(256)) * (16 << 10)  # 4 MiB: more than a socket pair buffers
    received = bytearray()

    async def read_all() -> None:
        while len(received) < 2 * len(frame):
            received.extend(await peer.receive_some(1 << 20))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await conn._respond(frame[:100])  # taken at once
            nursery.start_soon(read_all)
            await conn._respond(frame[100:] + frame)
    assert received == frame + frame
    await peer.aclose()
    with trio.fail_after(60):
        for _ in range(3):  # the first write may still land in the buffer; later ones break
            await conn._respond(frame)
    assert conn._connection_scope.cancel_called
    await server.aclose()
    with trio.fail_after(60):
        await conn._respond(b"late")  # closed: no write into a descriptor number reused since


async def test_a_response_written_from_a_completion_keeps_the_gate_until_whole() -> None:
    """A response written without a task of its own (from an append's completion) that the
    socket takes only in part is finished by a task that holds the write gate meanwhile: a
    response written after it waits, and both arrive whole, in order."""
    a, b = trio.socket.socketpair()
    server, peer = trio.SocketStream(a), trio.SocketStream(b)
    conn = RemotingConnection(server, 8 << 20, 64 << 10)
    first = bytes(range(256)) * (16 << 10)  # 4 MiB: more than a socket pair buffers
    second = b"after" * 1000
    received = bytearray()

    async def read_all() -> None:
        while len(received) < len(first) + len(second):
            received.extend(await peer.receive_some(1 << 20))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            conn._nursery = nursery
            nursery.start_soon(conn._write_loop, nursery.cancel_scope)
            conn._respond_now(first)  # part written now, the rest by a task of the connection
            assert conn._write_gate.taken
            await conn._respond(second)  # the gate is held: queued for the writer task
            nursery.start_soon(read_all)
            while len(received) < len(first) + len(second):  # noqa: ASYNC110
                await trio.sleep(0.01)
            conn.close()  # the writer task ends
    assert received == first + second
    await peer.aclose()
    await server.aclose()
