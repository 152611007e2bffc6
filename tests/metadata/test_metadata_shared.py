"""The shared metadata store's own promises (the conformance suite covers the common ones):
a session is its connection, a silent client's session expires, a broken peer costs only its
own connection, and a client whose session ended gets LOST and then a new session."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger_backend.metadata import MetadataStore, SessionState, open_store
from ledger_backend.metadata.shared_client import SharedMetadataStore
from ledger_backend.metadata.shared_server import serve_shared_store
from ledger_backend.metadata.shared_wire import FrameBuffer, WireError, encode_frame

REPO = Path(__file__).resolve().parents[2]


async def start_server(nursery: trio.Nursery, tmp_path: Path) -> str:
    """A server as the supervisor runs it: with its own session, so the tree stays open."""
    socket_path = str(tmp_path / "m.sock")
    own = await open_store(f"embedded:{tmp_path / 'metadata'}")

    async def serve(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_shared_store(partial(open_store, f"embedded:{tmp_path / 'metadata'}"),
                                     socket_path, task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await own.close()

    await nursery.start(serve)
    return socket_path


async def wait_gone(store: MetadataStore, path: str, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        async with store.watch(path) as watcher:
            if await store.exists(path) is None:
                return
            async for event in watcher:
                if event.kind == "deleted":
                    return


CLIENT = """
import sys, trio
from ledger_backend.metadata import open_store
async def main():
    store = await open_store("shared:" + sys.argv[1])
    await store.create("/ephemeral-of-child", b"x", ephemeral=True)
    print("created", flush=True)
    await trio.sleep_forever()
trio.run(main)
"""


async def test_kill_9_of_a_client_process_drops_its_ephemeral_nodes(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    socket_path = await start_server(nursery, tmp_path)
    watcher_store = await open_store(f"shared:{socket_path}")
    try:
        child = await trio.lowlevel.open_process(
            [sys.executable, "-c", CLIENT, socket_path], stdout=subprocess.PIPE, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            assert child.stdout is not None
            with trio.fail_after(60):
                assert b"created" in await child.stdout.receive_some(100)
            assert (await watcher_store.exists("/ephemeral-of-child")).ephemeral  # type: ignore[union-attr]
            child.send_signal(signal.SIGKILL)
            # no session timeout to wait for: the kernel closes the socket, the node goes
            await wait_gone(watcher_store, "/ephemeral-of-child", timeout_s=5.0)
        finally:
            child.kill()
            await child.wait()
            await child.stdout.aclose()  # type: ignore[union-attr]
    finally:
        await watcher_store.close()


def raw_connect(socket_path: str, timeout_ms: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(socket_path)
    sock.sendall(encode_frame({"id": 1, "op": "hello", "version": 1, "timeout_ms": timeout_ms}))
    return sock


async def raw_request(sock: socket.socket, message: dict[str, object]) -> dict[str, object]:
    buffer = FrameBuffer()
    await trio.to_thread.run_sync(sock.sendall, encode_frame(message))
    while True:
        data = await trio.to_thread.run_sync(sock.recv, 65536)
        assert data, "connection closed"
        for frame in buffer.feed(data):
            if frame.get("id") == message["id"]:
                return frame


async def test_a_silent_client_loses_its_session_after_the_timeout(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    socket_path = await start_server(nursery, tmp_path)
    store = await open_store(f"shared:{socket_path}")
    sock = raw_connect(socket_path, timeout_ms=1000)  # the minimum the server grants
    try:
        answer = await raw_request(sock, {"id": 2, "op": "create", "path": "/silent",
                                          "data": "", "ephemeral": True})
        assert answer["ok"] == "/silent"
        started = trio.current_time()
        await wait_gone(store, "/silent")  # then it says nothing: a paused process
        assert trio.current_time() - started >= 0.5
        sock.settimeout(10)
        assert await trio.to_thread.run_sync(sock.recv, 65536) == b""  # and the server hung up
    finally:
        sock.close()
        await store.close()


@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff",  # a length far above the limit: refused before allocating
    struct.pack(">I", 5) + b"nope!",  # not JSON
    encode_frame({"id": 1, "op": "get", "path": "/"}),  # no hello first
])
async def test_a_broken_peer_costs_only_its_connection(
        nursery: trio.Nursery, tmp_path: Path, garbage: bytes) -> None:
    socket_path = await start_server(nursery, tmp_path)
    store = await open_store(f"shared:{socket_path}")
    try:
        await store.create("/mine", b"1", ephemeral=True)
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(socket_path)
        sock.settimeout(10)
        try:
            sock.sendall(garbage)
            assert await trio.to_thread.run_sync(sock.recv, 100) == b""  # closed by the server
        finally:
            sock.close()
        data, _ = await store.get("/mine")  # everyone else is served as before
        assert data == b"1"
    finally:
        await store.close()


async def test_a_connection_reset_by_a_dying_client_never_stops_the_server(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    socket_path = await start_server(nursery, tmp_path)
    sock = raw_connect(socket_path, timeout_ms=5000)
    await raw_request(sock, {"id": 2, "op": "create", "path": "/reset", "data": "",
                             "ephemeral": True})
    await trio.to_thread.run_sync(sock.sendall, encode_frame({"id": 3, "op": "ping"}))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # with unread data and linger 0: the server's read sees a reset
    store = await open_store(f"shared:{socket_path}")
    try:
        await wait_gone(store, "/reset", timeout_s=5.0)
        await store.create("/still-served", b"")
    finally:
        await store.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_frame_buffer_never_crashes_on_bad_input(data: bytes) -> None:
    buffer = FrameBuffer(max_frame_bytes=1 << 16)
    try:
        for frame in buffer.feed(data):
            assert isinstance(frame, dict)
    except WireError:
        pass


async def test_a_lost_connection_is_lost_then_a_new_session(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    socket_path = await start_server(nursery, tmp_path)
    store = await open_store(f"shared:{socket_path}")
    assert isinstance(store, SharedMetadataStore)
    try:
        events = store.session_events()
        assert await events.receive() is SessionState.CONNECTED
        await store.create("/before", b"", ephemeral=True)
        first_session = store.session_id
        link = store._link
        assert link is not None
        await link.stream.aclose()  # the connection breaks (as when the server expires it)
        with trio.fail_after(20):
            assert await events.receive() is SessionState.LOST
            assert await events.receive() is SessionState.CONNECTED
        assert store.session_id != first_session
        # the old session's node goes with it: the server drops it once it sees the connection
        # end, which may come after the client's new session (reads do not queue behind writes)
        with trio.fail_after(20):
            while await store.exists("/before") is not None:  # noqa: ASYNC110 (polls the server)
                await trio.sleep(0.01)
        await store.create("/after", b"", ephemeral=True)  # the new session works
    finally:
        await store.close()
