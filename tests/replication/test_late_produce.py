"""A produce the remote applies after the replicator gave up on it is not a duplicate.

A replicator (in this process, over a small local stand-in log of 400 records) sends to a real
standalone through a TCP proxy that holds back the third produce request of the first pipeline
and the ones behind it, so the replicator times out (the remote timeout is 2 s here) and starts
a new session.  The held requests are then delivered to the remote late:

- "after": once the new session has sent everything: they are refused as out of order, or,
  those that repeat one of the producer's last 5 batches there exactly, taken as its retry;
- "before-first-send": after the new session scanned the remote's tail, just before its first
  produce: they are applied, and the new session's batches that repeat them are taken as their
  retries.

Either way the remote holds each of the 400 records exactly once, in order.  (With a fresh
producer id per session, the late batches were appended again: duplicates.)
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

import gateway.replication.remote as remote_module
from gateway.replication.checkpoints import CheckpointStore
from gateway.replication.clusters import RemoteCluster
from gateway.replication.remote import RemoteKafka
from gateway.replication.replicator import PartitionReplicator
from gateway.topics.topic_node import TopicInfo
from ledger_backend.metadata import open_store
from protocols.kafka.errors import ErrorCode
from tests.replication.geo_pair import read_all
from tests.replication.test_replicator_pipeline import RECORDS, LocalLog, _until
from tests.support.ports import free_port
from tests.support.standalone import Standalone, running_standalone
from tests.support.topic_nodes import write_topic_node

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRODUCE, FETCH = 0, 1
TOPIC_ID = uuid.uuid4()  # its node in the store says so (a checkpoint claim reads it)
HOLD_FROM = 3  # the first pipeline's produce requests from this one on are held back


class Local:
    """The local side: one partition of `RECORDS` committed records under `topic`."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.log = LocalLog()
        self.topic_id = TOPIC_ID  # one topic: the same id every time it is looked up

    async def partition(self, topic: str, partition: int) -> LocalLog:
        return self.log

    def topics(self) -> dict[str, TopicInfo]:
        return {self.topic: TopicInfo(self.topic, self.topic_id, 1, {})}

    def open_partitions(self) -> dict[tuple[str, int], LocalLog]:
        return {(self.topic, 0): self.log}


async def _frame(stream: trio.SocketStream, buffer: bytearray) -> bytes | None:
    """One size-prefixed Kafka frame (with its prefix), None at the end of the stream (or a
    reset: a replicator session that timed out while the late requests were delivered, over
    2 s at load 12-17, closed its connection, and an answer forwarded to it after that was
    refused with a reset)."""
    while True:
        if len(buffer) >= 4:
            size = struct.unpack(">i", buffer[:4])[0]
            if len(buffer) >= 4 + size:
                frame = bytes(buffer[:4 + size])
                del buffer[:4 + size]
                return frame
        try:
            chunk = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return None
        if not chunk:
            return None
        buffer += chunk


def _produce_error(answer: bytes) -> int:
    """The error code of a one-partition Produce v7 answer (after its size prefix)."""
    pos = 4 + 4 + 4  # size, correlation id, topics array length
    (name_length,) = struct.unpack(">h", answer[pos:pos + 2])
    pos += 2 + name_length + 4 + 4  # topic name, partitions array length, partition index
    return int(struct.unpack(">h", answer[pos:pos + 2])[0])


class LateProxy:
    """Forwards Kafka connections to `target`, holding back produce requests as described in
    the module docstring; `late_codes` are the remote's answers to the held ones."""

    def __init__(self, target: tuple[str, int], mode: str) -> None:
        self.target = target
        self.mode = mode
        self.produces = 0
        self.holding: int | None = None  # id of the connection whose requests are held
        self.held: list[bytes] = []
        self.late_codes: list[int] = []
        self.first_pipeline_closed = trio.Event()
        self.fetched_after_close = False
        self._connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self._connections += 1
        me = self._connections
        server = await trio.open_tcp_stream(*self.target)
        async with server, stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._answers, server, stream, nursery.cancel_scope)
            buffer = bytearray()
            while (frame := await _frame(stream, buffer)) is not None:
                api_key = struct.unpack(">h", frame[4:6])[0]
                if api_key == PRODUCE:
                    self.produces += 1
                    if self.holding is None and self.produces == HOLD_FROM:
                        self.holding = me
                    elif (self.mode == "before-first-send" and self.held
                          and not self.late_codes and self.fetched_after_close):
                        await self.deliver_late()  # the scan is done: now, before this one
                if self.holding == me:
                    self.held.append(frame)
                    continue
                if api_key == FETCH and self.first_pipeline_closed.is_set():
                    self.fetched_after_close = True
                await server.send_all(frame)
            if self.holding == me:
                self.first_pipeline_closed.set()
                self.holding = -1  # no more holding
            nursery.cancel_scope.cancel()

    async def _answers(self, server: trio.SocketStream, client: trio.SocketStream,
                       scope: trio.CancelScope) -> None:
        try:
            while chunk := await server.receive_some(65536):
                await client.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    async def deliver_late(self) -> None:
        """Send the held requests on a connection of their own; keep the answers' codes."""
        async with await trio.open_tcp_stream(*self.target) as server:
            buffer = bytearray()
            for frame in self.held:
                await server.send_all(frame)
                answer = await _frame(server, buffer)
                assert answer is not None
                self.late_codes.append(_produce_error(answer))


@pytest.fixture(scope="module")
def west(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with running_standalone(tmp_path_factory.mktemp("late") / "west",
                            extra_args=["--cluster-name", "west"]) as server:
        yield server


@pytest.mark.parametrize("mode", ["after", "before-first-send"])
async def test_a_late_produce_is_not_a_duplicate(west: Standalone, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 mode: str) -> None:
    topic = f"late.{mode}"
    monkeypatch.setattr(remote_module, "REMOTE_TIMEOUT_S", 2.0)
    # every request through the proxy (the remote's metadata names its own address)
    monkeypatch.setattr(RemoteKafka, "_leader", lambda self, t, p: None)
    host, port = west.bootstrap.split(":")
    proxy = LateProxy((host, int(port)), mode)
    store = await open_store(f"embedded:{tmp_path}")
    await write_topic_node(store, topic, TOPIC_ID)
    try:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, proxy.serve, 0,
                                                    host="127.0.0.1"))
            proxy_port = listeners[0].socket.getsockname()[1]
            remote = RemoteKafka(RemoteCluster("west", f"127.0.0.1:{proxy_port}"), "late-test")
            replicator = PartitionReplicator(
                Local(topic), remote, CheckpointStore(store, "west", topic, 0), "east", topic,
                0, checkpoint_interval_s=0.0, retry_backoff_s=0.05)
            nursery.start_soon(replicator.run)
            await _until(lambda: replicator.status.source_next == RECORDS
                         and replicator.status.state == "idle", "everything sent")
            assert proxy.held and proxy.first_pipeline_closed.is_set()
            if mode == "after":
                await proxy.deliver_late()
            nursery.cancel_scope.cancel()
        await remote.aclose()
    finally:
        await store.close()
    assert len(proxy.late_codes) == len(proxy.held)  # the remote did get them, late
    if mode == "after":  # refused, except those that repeat one of the producer's last 5
        # batches there exactly: taken as its retry (answered, not stored again)
        codes = proxy.late_codes
        retries = len(codes) - len([c for c in codes if c != 0])
        assert retries <= 5 and all(c == 0 for c in codes[len(codes) - retries:]), codes
        assert all(c == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                   for c in codes[:len(codes) - retries]), codes
    messages = await trio.to_thread.run_sync(read_all, west, topic, 1)
    origins = [int.from_bytes(dict(m.headers)["lw.origin.offset"], "big") for m in messages]
    assert origins == list(range(RECORDS))  # each once, in order


async def test_a_bootstrap_broker_that_does_not_answer_is_passed_over(west: Standalone) -> None:
    """A remote registered with several brokers is reached through the first that answers."""
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    remote = RemoteKafka(RemoteCluster("west", f"{nobody},{west.bootstrap}"), "late-test")
    try:
        assert await remote.ensure_topic("late.bootstrap", 2, {}) == 2
        assert await remote.metadata("late.bootstrap") is not None  # the live one, first now
    finally:
        await remote.aclose()
