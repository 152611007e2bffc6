"""The broker listener reads its sockets directly (RemotingConnection._receive_some, not Trio's
stream wrappers): frames that arrive together, split, or behind a connection reset are read as
through the stream.  A reset is an ended connection (no log line above INFO, no traceback) and
the listener goes on serving others."""

from __future__ import annotations

import logging
import socket
import struct

import pytest
import trio

from gateway.rocketmq.listener import ListenAddress, _serve_remoting
from gateway.rocketmq.remoting_connection import RemotingConnection
from protocols.rocketmq.codec import RemotingCommand, encode_command, make_request, make_response
from tests.rocketmq.remoting_client import RawClient

CODE = 105  # any request code: the handler below answers every one


async def _serving(nursery: trio.Nursery, handle) -> str:  # type: ignore[no-untyped-def]
    async def serve(task_status: trio.TaskStatus[ListenAddress]) -> None:
        await _serve_remoting("test", handle, "127.0.0.1", 0, max_frame_bytes=1 << 20,
                              max_header_bytes=1 << 16, task_status=task_status)

    address: ListenAddress = await nursery.start(serve)
    return f"{address.host}:{address.port}"


async def _echo(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
    return make_response(request, 0, request.body.decode())


async def test_frames_together_and_split_are_each_answered() -> None:
    async with trio.open_nursery() as nursery:
        client = await RawClient.connect(await _serving(nursery, _echo))
        requests = [make_request(CODE, {"i": i}, f"body-{i}".encode() * (i + 1))
                    for i in range(20)]
        wire = b"".join(encode_command(r) for r in requests)
        # ten whole frames in one write, then the rest cut at odd places (a frame's length
        # prefix and header split across writes)
        cut = sum(len(encode_command(r)) for r in requests[:10])
        await client.send_raw(wire[:cut])
        for start in range(cut, len(wire), 7):
            await client.send_raw(wire[start:start + 7])
            await trio.lowlevel.checkpoint()
        answers = {}
        for _ in requests:
            answer = await client.receive(wait_s=10.0)
            assert answer is not None
            answers[answer.opaque] = answer.remark
        assert answers == {r.opaque: r.body.decode() for r in requests}
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_reset_connection_ends_quietly_and_others_are_served(
        caplog: pytest.LogCaptureFixture) -> None:
    arrived = trio.Event()
    release = trio.Event()

    async def handle(conn: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        if request.ext_fields.get("hold") == "1":
            arrived.set()
            await release.wait()  # answered after the client is gone
        return make_response(request, 0, "ok")

    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        addr = await _serving(nursery, handle)
        host, port = addr.split(":")
        sock = trio.socket.socket()
        await sock.connect((host, int(port)))
        await sock.send(encode_command(make_request(CODE, {"hold": "1"})))
        await arrived.wait()
        # RST instead of FIN: the listener's next read fails with ECONNRESET
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        await trio.sleep(0.2)
        release.set()
        other = await RawClient.connect(addr)
        with trio.fail_after(10):
            answer = await other.call(CODE, {})
        assert answer.code == 0
        await other.aclose()
        nursery.cancel_scope.cancel()
    loud = [r for r in caplog.records if r.levelno > logging.INFO or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
