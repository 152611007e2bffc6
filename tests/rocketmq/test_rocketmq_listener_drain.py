"""A RocketMQ listener that shuts down answers every request that reached its connections
before closing them (gateway/rocketmq/listener.py): a RocketMQ client does not fail a request
whose connection closes, it waits out its send timeout, so a request written while the broker
drains must be read and answered, and the connection closed only once it is idle."""

from __future__ import annotations

import trio

from gateway.rocketmq.listener import ListenAddress, _serve_remoting
from gateway.rocketmq.remoting_connection import RemotingConnection
from protocols.rocketmq.codec import RemotingCommand, encode_command, make_request, make_response
from tests.rocketmq.remoting_client import RawClient

CODE = 105  # any request code: the handler below answers every one


async def test_a_request_written_while_the_listener_drains_is_answered() -> None:
    release_first = trio.Event()
    first_arrived, second_arrived = trio.Event(), trio.Event()
    seen: list[int] = []

    async def handle(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        seen.append(request.opaque)
        if len(seen) == 1:
            first_arrived.set()
            await release_first.wait()  # in flight when the shutdown starts
        else:
            second_arrived.set()
        return make_response(request, 0, "ok")

    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def serve(task_status: trio.TaskStatus[ListenAddress]) -> None:
            with server_scope:
                await _serve_remoting("test", handle, "127.0.0.1", 0, max_frame_bytes=1 << 20,
                                      max_header_bytes=1 << 16, drain_timeout_s=10.0,
                                      task_status=task_status)

        address: ListenAddress = await nursery.start(serve)
        client = await RawClient.connect(f"{address.host}:{address.port}")
        first = make_request(CODE, {})
        await client.stream.send_all(encode_command(first))
        await first_arrived.wait()

        server_scope.cancel()  # shutting down with `first` in flight
        await trio.sleep(0.05)
        second = make_request(CODE, {})  # written after the shutdown began
        await client.stream.send_all(encode_command(second))
        with trio.fail_after(10):
            await second_arrived.wait()  # read although the listener is shutting down
        release_first.set()

        answers = {}
        for _ in range(2):
            answer = await client.receive(wait_s=10.0)
            assert answer is not None, "connection closed with a request unanswered"
            answers[answer.opaque] = answer.code
        assert answers == {first.opaque: 0, second.opaque: 0}
        assert await client.receive(wait_s=10.0) is None  # then closed, once idle
        await client.stream.aclose()


async def test_a_request_answered_without_a_task_is_answered_before_the_close() -> None:
    """A request started without a task of its own (a send answered from its append's
    completion) keeps a draining connection open until it is answered, even after the
    connection stopped reading; an unexpected failure is answered SYSTEM_ERROR."""
    started: list[tuple[RemotingConnection, RemotingCommand, object]] = []
    arrived = trio.Event()

    async def handle(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        raise AssertionError("started requests take no task")

    def start(conn: RemotingConnection, request: RemotingCommand, respond: object) -> bool:
        started.append((conn, request, respond))
        if len(started) == 2:
            arrived.set()
        return True

    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def serve(task_status: trio.TaskStatus[ListenAddress]) -> None:
            with server_scope:
                await _serve_remoting("test", handle, "127.0.0.1", 0, max_frame_bytes=1 << 20,
                                      max_header_bytes=1 << 16, drain_timeout_s=6.0,
                                      start=start, task_status=task_status)

        address: ListenAddress = await nursery.start(serve)
        client = await RawClient.connect(f"{address.host}:{address.port}")
        first, second = make_request(CODE, {}), make_request(CODE, {})
        await client.stream.send_all(encode_command(first) + encode_command(second))
        with trio.fail_after(10):
            await arrived.wait()
        server_scope.cancel()
        conn = started[0][0]
        with trio.fail_after(15):  # not idle (two requests unanswered): read until half-time
            while not conn._read_scope.cancel_called:  # noqa: ASYNC110
                await trio.sleep(0.05)
        started[0][2](make_response(first, 0, "ok"))  # type: ignore[operator]
        started[1][2](RuntimeError("boom"))  # type: ignore[operator]
        answers = {}
        for _ in range(2):
            answer = await client.receive(wait_s=10.0)
            assert answer is not None, "connection closed with a request unanswered"
            answers[answer.opaque] = answer.code
        assert answers == {first.opaque: 0, second.opaque: 1}  # 1: SYSTEM_ERROR
        assert await client.receive(wait_s=10.0) is None  # then closed
        await client.aclose()
