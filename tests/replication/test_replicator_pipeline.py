"""The replicator's produce pipeline against a remote whose answers the test hands out one by
one: up to MAX_IN_FLIGHT batches in flight (re-framed ones and, with a low threshold, stored batches
forwarded whole), the durable position never past an unanswered batch, and a
failure in the middle of the pipeline (a batch the remote stored and still answered with an
error among them) ends with every record in the remote exactly once, in order; a session
that starts from a settled checkpoint does not scan the remote.

The local partition and the remote are small stand-ins; the checkpoint lives in a real
embedded metadata store.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

import gateway.replication.record_rewrite as record_rewrite
from gateway.replication.batches import record_origins
from gateway.replication.checkpoints import CheckpointStore, read_checkpoint
from gateway.replication.clusters import RemoteCluster
from gateway.replication.offset_translation import translate
from gateway.replication.remote import MAX_IN_FLIGHT, RemoteError
from gateway.replication.replicator import PartitionReplicator
from gateway.topics.topic_node import TopicInfo
from ledger_backend.metadata import open_store
from protocols.kafka.record_batch import (
    Record,
    build_batch,
    decode_records,
    parse_header,
    patch_base_offset,
)
from tests.support.topic_nodes import write_topic_node

TOPIC = "orders"
TOPIC_ID = uuid.uuid4()  # its node in the store says so (a checkpoint claim reads it)
RECORDS = 400


class LocalLog:
    """A partition holding `RECORDS` committed records in batches of 10, read 2 at a time (so
    each read makes one outgoing batch of 20 records, which moves the position when answered)."""

    def __init__(self) -> None:
        self.batches = [build_batch([Record(0, 1000 + b * 10 + i, b"k", b"v" * 100, [])
                                     for i in range(10)], base_offset=b * 10)
                        for b in range(RECORDS // 10)]
        self.log_start_offset = 0
        self.last_stable_offset = RECORDS

    async def read(self, offset: int, max_bytes: int) -> list[bytes]:
        return [b for b in self.batches if parse_header(b).last_offset >= offset][:2]

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        return []

    async def wait_for_data(self, offset: int, timeout_s: float, *, committed: bool) -> None:
        await trio.sleep(timeout_s)


class LocalTopics:
    def __init__(self) -> None:
        self.log = LocalLog()
        self.topic_id = TOPIC_ID  # one topic: the same id every time it is looked up

    async def partition(self, topic: str, partition: int) -> LocalLog:
        return self.log

    def topics(self) -> dict[str, TopicInfo]:
        return {TOPIC: TopicInfo(TOPIC, self.topic_id, 1, {})}

    def open_partitions(self) -> dict[tuple[str, int], LocalLog]:
        return {(TOPIC, 0): self.log}


@dataclass
class Pipeline:
    """Sends land in `sent`; each answer waits for the test's verdict: "ok" (stored, base
    offset answered), "stored-but-failed" (stored, error answered) or "fail" (not stored)."""

    remote: Remote
    sent: list[bytes] = field(default_factory=list)
    answered: int = 0
    most_in_flight: int = 0

    @property
    def in_flight(self) -> int:
        return len(self.sent) - self.answered

    async def send(self, batch: bytes) -> None:
        if self.remote.settled is not None and await self.remote.settled():
            self.remote.sent_while_settled += 1
        self.sent.append(batch)
        self.most_in_flight = max(self.most_in_flight, self.in_flight)

    async def receive(self) -> int:
        verdict = await self.remote.verdicts.receive()
        batch = self.sent[self.answered]
        self.answered += 1
        if verdict == "fail":
            raise RemoteError("no answer")
        base = self.remote.store(batch)
        if verdict == "stored-but-failed":
            raise RemoteError("answered too late")
        return base

    async def aclose(self) -> None:
        pass


class Remote:
    """The remote partition: what it stored, and the verdicts the test hands out."""

    def __init__(self) -> None:
        self.cluster = RemoteCluster("west", "127.0.0.1:1")
        self.log: list[bytes] = []
        self.pipelines: list[Pipeline] = []
        self.hand_out, self.verdicts = trio.open_memory_channel[str](1000)
        self.fetches = 0
        self.settled: Any = None  # async () -> whether the stored checkpoint says settled
        self.sent_while_settled = 0

    def store(self, batch: bytes) -> int:
        base = sum(parse_header(b).records_count for b in self.log)
        stored = bytearray(batch)
        patch_base_offset(stored, base)
        self.log.append(bytes(stored))
        return base

    async def ensure_topic(self, topic: str, partitions: int, configs: Any) -> int:
        return 1

    async def init_producer_id(self) -> tuple[int, int]:
        return 7, len(self.pipelines)

    async def list_offset(self, topic: str, partition: int, timestamp: int = -2) -> int:
        return 0

    async def fetch(self, topic: str, partition: int, offset: int,
                    max_bytes: int = 0) -> tuple[bytes, int]:
        self.fetches += 1
        end = sum(parse_header(b).records_count for b in self.log)
        return b"".join(b for b in self.log if parse_header(b).last_offset >= offset), end

    async def pause_after_failure(self, delay_s: float) -> None:
        await trio.sleep(delay_s)

    async def open_pipeline(self, topic: str, partition: int) -> Pipeline:
        self.pipelines.append(Pipeline(self))
        return self.pipelines[-1]

    def origin_offsets(self) -> list[int]:
        out = []
        for batch in self.log:
            for origin in record_origins(batch):
                assert origin is not None and origin[0] == "east"
                out.append(origin[1])
        return out


async def _until(condition: Any, what: str) -> None:
    """Wait for `condition()` (a value or an awaitable), generously: a loaded machine."""
    async def holds() -> bool:
        value = condition()
        return bool(await value if hasattr(value, "__await__") else value)

    with trio.move_on_after(60):
        while not await holds():  # noqa: ASYNC110 (a state of the code under test)
            await trio.sleep(0.01)
    assert await holds(), f"timed out waiting for {what}"


async def _equals(value: Any, expected: int) -> bool:
    return bool(await value == expected)


@pytest.fixture(params=["re-framed", "forwarded"])
def forwarding(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a stored batch leaves: re-framed with others, or forwarded whole (a 10-record
    batch here is far below the threshold: lower it)."""
    if request.param == "forwarded":
        monkeypatch.setattr(record_rewrite, "FORWARD_MIN_BYTES", 0)
    return str(request.param)


async def test_full_pipeline_position_only_past_answers_and_a_broken_pipeline_heals(
        tmp_path: Path, forwarding: str) -> None:
    store = await open_store(f"embedded:{tmp_path}")
    await write_topic_node(store, TOPIC, TOPIC_ID)
    remote = Remote()
    topics = LocalTopics()
    replicator = PartitionReplicator(topics, remote,  # type: ignore[arg-type]
                                     CheckpointStore(store, "west", TOPIC, 0), "east", TOPIC, 0,
                                     checkpoint_interval_s=0.0, retry_backoff_s=0.01)

    async def position() -> int:
        checkpoint = await read_checkpoint(store, "west", TOPIC, 0)
        return checkpoint.source_next if checkpoint is not None else 0

    async def settled() -> bool:
        checkpoint = await read_checkpoint(store, "west", TOPIC, 0)
        return checkpoint is not None and checkpoint.settled

    remote.settled = settled
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replicator.run)
            await _until(lambda: remote.pipelines
                         and remote.pipelines[0].in_flight == MAX_IN_FLIGHT,
                         "a full pipeline")
            first = remote.pipelines[0]
            assert await position() == 0  # nothing answered: nothing durable
            acked = [parse_header(b).records_count for b in first.sent[:2]]
            for _ in range(2):
                remote.hand_out.send_nowait("ok")
            await _until(lambda: replicator.status.source_next == sum(acked), "two answers")
            await _until(lambda: first.in_flight == MAX_IN_FLIGHT, "the pipeline refilled")
            assert await position() <= sum(acked)  # never past an unanswered batch
            # the third is stored but its answer is an error; the rest are in doubt
            remote.hand_out.send_nowait("stored-but-failed")
            await _until(lambda: len(remote.pipelines) == 2, "a new session")
            for _ in range(1000):  # the new session: every answer good
                remote.hand_out.send_nowait("ok")
            await _until(lambda: replicator.status.source_next == RECORDS
                         and replicator.status.state == "idle", "the rest sent")
            assert remote.origin_offsets() == list(range(RECORDS))  # once each, in order
            whole = [any(k == "lw.origin.records" for k, _ in decode_records(b)[0].headers)
                     for b in remote.log]
            assert all(whole) if forwarding == "forwarded" else not any(whole)
            await _until(lambda: _equals(position(), RECORDS), "the last checkpoint")
            # the new session resumed past the third batch (found stored there) without reading
            # it: inbound pairs there would be unknown, and the checkpoint says so
            stored = await read_checkpoint(store, "west", TOPIC, 0)
            assert stored is not None and stored.unnoted == sum(
                parse_header(b).records_count for b in first.sent[:3])
            assert max(p.most_in_flight for p in remote.pipelines) == MAX_IN_FLIGHT
            await _until(settled, "a settled checkpoint")
            nursery.cancel_scope.cancel()

        # idle, all answered: the checkpoint is settled, so the next session (another
        # replicator, as after a restart) skips the scan of the remote's tail
        def append(batches: int) -> None:
            end = topics.log.last_stable_offset
            topics.log.batches += [build_batch([Record(0, 9000 + i, b"k", b"late", [])
                                                for i in range(10)], base_offset=end + 10 * b)
                                   for b in range(batches)]
            topics.log.last_stable_offset = end + 10 * batches

        append(4)
        fetches = remote.fetches
        again = PartitionReplicator(topics, remote,  # type: ignore[arg-type]
                                    CheckpointStore(store, "west", TOPIC, 0), "east", TOPIC, 0,
                                    checkpoint_interval_s=0.0, retry_backoff_s=0.01)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(again.run)
            await _until(lambda: again.status.source_next == RECORDS + 40, "the late records")
            await _until(settled, "settled again")
            append(2)  # busy again in the same session
            await _until(lambda: again.status.source_next == RECORDS + 60, "the later ones")
            nursery.cancel_scope.cancel()
        assert remote.fetches == fetches
        assert remote.sent_while_settled == 0  # unsettled before anything was sent
        assert remote.origin_offsets() == list(range(RECORDS + 60))
    finally:
        await store.close()


class SlowCheckpoints(CheckpointStore):
    """A checkpoint store whose writes wait for the test once `blocking` is set."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.blocking = False
        self.blocked = 0
        self.release = trio.Event()

    async def save(self, checkpoint: Any) -> None:
        if self.blocking:
            self.blocked += 1
            await self.release.wait()
        await super().save(checkpoint)


async def test_a_slow_checkpoint_write_holds_back_neither_sends_nor_answers(
        tmp_path: Path) -> None:
    """The metadata store took 45-460 ms a write at load ~9, once a second per partition: the
    position is written beside the pipeline, which keeps sending and taking answers."""
    store = await open_store(f"embedded:{tmp_path}")
    await write_topic_node(store, TOPIC, TOPIC_ID)
    remote = Remote()
    checkpoints = SlowCheckpoints(store, "west", TOPIC, 0)
    replicator = PartitionReplicator(LocalTopics(), remote,  # type: ignore[arg-type]
                                     checkpoints, "east", TOPIC, 0, checkpoint_interval_s=0.0,
                                     retry_backoff_s=0.01)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replicator.run)
            await _until(lambda: remote.pipelines
                         and remote.pipelines[0].in_flight == MAX_IN_FLIGHT, "a full pipeline")
            checkpoints.blocking = True
            remote.hand_out.send_nowait("ok")
            await _until(lambda: checkpoints.blocked == 1, "a checkpoint write under way")
            for _ in range(4):  # the log's 20 batches: 16 in flight and 4 more
                remote.hand_out.send_nowait("ok")
            await _until(lambda: remote.pipelines[0].answered == 5, "four more answers")
            await _until(lambda: len(remote.pipelines[0].sent) == MAX_IN_FLIGHT + 4,
                         "four more sends")
            assert replicator.status.source_next == 5 * 20  # acknowledged, not yet durable
            assert checkpoints.blocked == 1  # the write is still waiting
            checkpoints.blocking = False
            checkpoints.release.set()
            for _ in range(1000):
                remote.hand_out.send_nowait("ok")
            await _until(lambda: replicator.status.state == "idle"
                         and _equals(_position(store), RECORDS), "all sent and durable")
            nursery.cancel_scope.cancel()
        assert remote.origin_offsets() == list(range(RECORDS))
        assert len(remote.pipelines) == 1
    finally:
        await store.close()


async def _position(store: Any) -> int:
    checkpoint = await read_checkpoint(store, "west", TOPIC, 0)
    return checkpoint.source_next if checkpoint is not None else 0



@pytest.mark.parametrize("answer", ["ok", "stored-but-failed"])
async def test_the_remote_s_own_records_between_two_sends_are_seen(tmp_path: Path,
                                                                   answer: str) -> None:
    """A record the remote's own writer stored between two of the replicator's batches is
    noted in the checkpoint as the first foreign record there: by the answer's base offset past
    the end of the batch before ("ok"), or, when that answer was lost ("stored-but-failed"), by
    the new session's scan of the remote's tail.  Until the remote's records are noted here,
    translations stop before it (offset_translation.translate)."""
    store = await open_store(f"embedded:{tmp_path}")
    await write_topic_node(store, TOPIC, TOPIC_ID)
    remote = Remote()
    replicator = PartitionReplicator(LocalTopics(), remote,  # type: ignore[arg-type]
                                     CheckpointStore(store, "west", TOPIC, 0), "east", TOPIC, 0,
                                     checkpoint_interval_s=0.0, retry_backoff_s=0.01)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replicator.run)
            await _until(lambda: remote.pipelines and len(remote.pipelines[0].sent) >= 3,
                         "three sends")
            for _ in range(2):
                remote.hand_out.send_nowait("ok")
            await _until(lambda: remote.pipelines[0].answered == 2, "two answers")
            foreign_at = remote.store(build_batch([Record(0, 5, b"k", b"west's own", [])]))
            remote.hand_out.send_nowait(answer)  # the third: stored after it
            if answer != "ok":
                await _until(lambda: len(remote.pipelines) == 2, "a new session")
            for _ in range(1000):
                remote.hand_out.send_nowait("ok")
            await _until(lambda: replicator.status.state == "idle"
                         and _equals(_position(store), RECORDS), "all sent and durable")
            nursery.cancel_scope.cancel()
        stored = await read_checkpoint(store, "west", TOPIC, 0)
        assert stored is not None and stored.foreign_from == foreign_at > 0
        assert stored.inbound == [] and translate(stored, RECORDS) <= foreign_at
    finally:
        await store.close()
