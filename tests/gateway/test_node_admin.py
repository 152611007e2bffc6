"""The node admin listener of `standalone --workers N` (gateway/process/node_admin.py) over
stand-in workers on unix sockets: /ready is the node's (ready when every worker is), a silent
worker (what a SIGSTOPped one looks like: its socket accepts, nothing answers) makes the node
not ready and is asked last by later calls, which the other worker answers."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import h11
import pytest
import trio

from gateway.process import node_admin
from gateway.process.node_admin import NodeAdmin


class FakeWorker:
    """An admin socket answering /ready with `ready_status` and anything else with its
    index; a silent one accepts connections and never answers."""

    def __init__(self, index: int, path: Path, ready_status: int = 200,
                 silent: bool = False) -> None:
        self.index, self.path = index, str(path)
        self.ready_status, self.silent = ready_status, silent
        self.accepted = 0

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(self.path)
        sock.listen(16)
        listener = trio.SocketListener(sock)
        task_status.started()
        await trio.serve_listeners(self.handle, [listener])

    async def handle(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        if self.silent:
            await trio.sleep_forever()
        conn = h11.Connection(h11.SERVER)
        target = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                target = event.target
            elif isinstance(event, h11.EndOfMessage):
                break
        status = self.ready_status if target == b"/ready" else 200
        body = json.dumps({"worker": self.index}).encode()
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=[
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body))])) or b"")
        await stream.send_all(conn.send(h11.Data(data=body)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
        await stream.aclose()


async def call(app: NodeAdmin, path: str) -> tuple[int, dict[str, Any]]:
    sent: list[MutableMapping[str, Any]] = []
    messages: list[MutableMapping[str, Any]] = [
        {"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> MutableMapping[str, Any]:
        return messages.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
               "query_string": b"", "headers": [(b"host", b"node")], "scheme": "http",
               "client": ("127.0.0.1", 1)}, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


async def with_workers(tmp_path: Path, workers: list[FakeWorker], test: Any) -> None:
    async with trio.open_nursery() as nursery:
        for worker in workers:
            await nursery.start(worker.serve)
        await test(NodeAdmin([w.path for w in workers]))
        nursery.cancel_scope.cancel()


async def test_the_node_is_ready_when_every_worker_is(tmp_path: Path) -> None:
    workers = [FakeWorker(0, tmp_path / "a0.sock"), FakeWorker(1, tmp_path / "a1.sock")]

    async def test(app: NodeAdmin) -> None:
        assert await call(app, "/ready") == (200, {"ready": True, "workers": {
            "0": "ready", "1": "ready"}})
        workers[1].ready_status = 503  # e.g. still loading its bundles
        assert await call(app, "/ready") == (503, {"ready": False, "workers": {
            "0": "ready", "1": "not ready"}})

    await with_workers(tmp_path, workers, test)


async def test_a_silent_worker_is_not_ready_and_is_asked_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_admin, "WORKER_TIMEOUT_S", 3.0)
    monkeypatch.setattr(node_admin, "READY_TIMEOUT_S", 3.0)
    silent = FakeWorker(0, tmp_path / "a0.sock", silent=True)
    workers = [silent, FakeWorker(1, tmp_path / "a1.sock")]

    async def test(app: NodeAdmin) -> None:
        assert await call(app, "/ready") == (503, {"ready": False, "workers": {
            "0": "no answer", "1": "ready"}})
        asked = silent.accepted
        assert await call(app, "/admin/v1/topics") == (200, {"worker": 1})  # after a timeout
        assert silent.accepted == asked + 1
        for _ in range(3):  # worker 0 is suspect now: worker 1 is asked first
            assert await call(app, "/admin/v1/topics") == (200, {"worker": 1})
        assert silent.accepted == asked + 1

    await with_workers(tmp_path, workers, test)


async def test_a_worker_refusing_before_reading_the_body_is_answered_not_a_500(
        tmp_path: Path) -> None:
    """A worker answers 401 from the headers alone and closes: the body the supervisor was
    still sending meets a broken pipe, and the worker's answer is what the client gets."""
    path = str(tmp_path / "w.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen(1)

    async def refuse() -> None:
        sock, _ = await listener.accept()
        with sock:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await sock.recv(65536)
            await sock.send(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 6\r\n"
                            b"connection: close\r\n\r\ndenied")
        listener.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refuse)
        status, _headers, body = await node_admin.call_worker(
            path, b"PUT", b"/admin/v1/topics/x", [(b"host", b"h")], b"x" * (16 << 20),
            timeout_s=30)
    assert (status, body) == (401, b"denied")
