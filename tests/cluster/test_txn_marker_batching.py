"""Transaction markers for another broker's partitions, coalesced per owner into few
WriteTxnMarkers requests (gateway/kafka/txn_marker_batching.py): many transactions ending together
on an in-process broker pair (tests/cluster/test_cluster_transactions_units.py) take a handful
of requests instead of one per partition, each caller still gets its own partition's error,
and a sender that gives up hands its batch to the next caller.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from gateway.cluster.peer_client import PeerClient
from gateway.kafka.txn_marker_batching import PendingMarker, RemoteMarkerWriter
from protocols.kafka.broker_api import BrokerEndpoint
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.transaction_coordinator import TxnState
from tests.cluster.test_cluster_transactions_units import TOPIC, two_brokers, txn_batch

WIDE = "wide"  # every partition on broker 2
TRANSACTIONS = 50
PARTITIONS_EACH = 4


async def test_fifty_concurrent_commits_share_few_marker_requests(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with two_brokers() as (one, two, owners):
        await one.topics.create_topic(WIDE, 8)
        await two.topics.refresh_topic(WIDE)
        for p in range(8):
            owners.owners[(WIDE, p)] = 2
        sent: list[int] = []
        peers = one.transactions._peers
        request = peers.request

        async def counting(host: str, port: int, api_key: int, version: int,
                           body: dict[str, Any]) -> dict[str, Any]:
            sent.append(api_key)
            return await request(host, port, api_key, version, body)

        peers.request = counting  # type: ignore[method-assign]

        transactions: list[tuple[str, int, int]] = []
        for i in range(TRANSACTIONS):
            txn_id = f"a-{i}"  # transaction partition 0: coordinated by broker 1
            pid, epoch = await one.transactions.init_producer_id(txn_id, 60_000)
            parts = [(WIDE, (i + k) % 8) for k in range(PARTITIONS_EACH)]
            codes = await one.transactions.add_partitions(txn_id, pid, epoch, parts)
            assert set(codes.values()) == {0}
            for _, p in parts:
                plog = await two.topics.partition(WIDE, p)
                await plog.append(txn_batch(pid, epoch, 0, b"%d" % i))
            transactions.append((txn_id, pid, epoch))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for txn_id, pid, epoch in transactions:
                    nursery.start_soon(one.transactions.end_transaction, txn_id, pid, epoch,
                                       True)
        for txn_id, _, _ in transactions:
            state = one.transactions.describe(txn_id)
            assert state is not None and state.state is TxnState.COMPLETE_COMMIT
        markers_requests = sent.count(27)
        assert 1 <= markers_requests <= 10, markers_requests  # not 200: one per partition
        assert one.transactions._markers.remote.requests_sent == markers_requests
        assert not [r for r in caplog.records if "marker failed" in r.getMessage()]
        for p in range(8):
            plog = await two.topics.partition(WIDE, p)
            assert plog.last_stable_offset == plog.high_watermark
            assert plog.aborted_transactions(0, plog.high_watermark) == []
        assert not any(t == WIDE for t, _ in one.topics.open_partitions())


async def test_each_caller_gets_its_own_partitions_answer_from_one_request() -> None:
    async with two_brokers() as (one, two, owners):
        pid_ok, epoch_ok = await one.transactions.init_producer_id("a-ok", 60_000)
        pid_bad, epoch_bad = await one.transactions.init_producer_id("a-bad", 60_000)
        for pid, epoch, p in ((pid_ok, epoch_ok, 1), (pid_bad, epoch_bad, 3)):
            await one.transactions.add_partitions(f"a-{'ok' if p == 1 else 'bad'}", pid,
                                                  epoch, [(TOPIC, p)])
            await (await two.topics.partition(TOPIC, p)).append(txn_batch(pid, epoch, 0, b"x"))
        peers = PeerClient("test")
        writer = RemoteMarkerWriter(peers)
        to_two = owners.endpoints[2]
        outcome: dict[str, Any] = {}

        async def write(name: str, marker: PendingMarker) -> None:
            try:
                await writer.write(to_two, marker)
                outcome[name] = 0
            except KafkaProtocolError as exc:
                outcome[name] = exc.code

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write, "ok", PendingMarker(pid_ok, epoch_ok, True, 1_000,
                                                              TOPIC, 1))
                # partition 0 is broker 1's: broker 2 refuses it (and does not open it)
                nursery.start_soon(write, "not-owner", PendingMarker(pid_bad, epoch_bad, True,
                                                                     1_000, TOPIC, 0))
                # a deposed coordinator epoch for a partition broker 2 owns
                nursery.start_soon(write, "fenced", PendingMarker(pid_bad, epoch_bad, True,
                                                                  1_000, TOPIC, 3))
            assert writer.requests_sent == 1
            assert outcome == {"ok": 0, "not-owner": ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               "fenced": 0}
            outcome.clear()
            await write("fenced", PendingMarker(pid_bad, epoch_bad, False, 999, TOPIC, 3))
            assert outcome == {"fenced": ErrorCode.TRANSACTION_COORDINATOR_FENCED}
            assert (TOPIC, 0) not in two.topics.open_partitions()
        finally:
            await peers.aclose()


def test_a_producers_second_transaction_waits_for_the_next_request() -> None:
    queue = [PendingMarker(5, 0, True, 1, "t", 0), PendingMarker(5, 1, False, 1, "t", 1),
             PendingMarker(6, 0, True, 1, "t", 0), PendingMarker(5, 0, True, 1, "t", 2)]
    first, second, other, same = queue
    batch = RemoteMarkerWriter._take_batch(queue)
    assert batch == [first, other, same] and queue == [second]


def test_a_request_carries_a_bounded_number_of_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.kafka.txn_marker_batching.MAX_MARKERS_PER_REQUEST", 2)
    queue = [PendingMarker(pid, 0, True, 1, "t", 0) for pid in range(5)]
    expected = list(queue)
    assert RemoteMarkerWriter._take_batch(queue) == expected[:2]
    assert queue == expected[2:]


class StallingPeers:
    """A PeerClient stand-in: the first request waits until released (`sender` is the task
    that sent it); all markers succeed."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.release = trio.Event()
        self.first_sent = trio.Event()
        self.sender: Any = None

    async def request(self, host: str, port: int, api_key: int, version: int,
                      body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        if len(self.bodies) == 1:
            self.sender = trio.lowlevel.current_task()
            self.first_sent.set()
            await self.release.wait()
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": 0}
                                               for p in t["partition_indexes"]]}
            for t in m["topics"]]} for m in body["markers"]]}


def _partitions(body: dict[str, Any]) -> list[int]:
    return [p for m in body["markers"] for t in m["topics"] for p in t["partition_indexes"]]


async def test_a_sender_that_gives_up_hands_its_batch_to_the_next_caller() -> None:
    peers = StallingPeers()
    writer = RemoteMarkerWriter(peers)  # type: ignore[arg-type]
    owner = BrokerEndpoint(2, "127.0.0.1", 1)
    done: list[int] = []
    scopes: dict[Any, tuple[int, trio.CancelScope]] = {}

    async def write(partition: int) -> None:
        with trio.CancelScope() as scope:
            scopes[trio.lowlevel.current_task()] = (partition, scope)
            await writer.write(owner, PendingMarker(7, 0, True, 1, "t", partition))
            done.append(partition)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, 0)
            nursery.start_soon(write, 1)
            await peers.first_sent.wait()
            assert _partitions(peers.bodies[0]) == [0, 1]  # one request carries both
            gave_up, scope = scopes[peers.sender]
            scope.cancel()  # the caller that sent it gives up while it is in flight
    other = 1 - gave_up
    assert done == [other]
    assert [_partitions(b) for b in peers.bodies] == [[0, 1], [other]]
