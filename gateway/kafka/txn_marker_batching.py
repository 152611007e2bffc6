"""Transaction markers for partitions owned by other brokers, coalesced per owner into
WriteTxnMarkers requests (Kafka's inter-broker API 27), for the cluster's transaction
coordinators (gateway/kafka/cluster_transactions.py).

This module must never decide which broker owns a partition (the caller names the owner, from
the ownership service) nor retry a failed marker: the caller's error is its own partition's
code, or the failure of the request that carried it, and the coordinator's retry loop decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio
import trio.lowlevel

from gateway.cluster.peer_client import PeerClient
from protocols.kafka.broker_api import BrokerEndpoint
from protocols.kafka.errors import ErrorCode, KafkaProtocolError, UnknownTopicOrPartitionError
from protocols.kafka.handlers.txn_inter_broker import WRITE_TXN_MARKERS

MAX_MARKERS_PER_REQUEST = 2000  # partitions; a request stays far below any frame limit


def raise_for_partition_code(code: int, what: str) -> None:
    """The error a peer's per-partition answer code means (none for 0)."""
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # deleted: the coordinator skips it
        raise UnknownTopicOrPartitionError(what)
    if code:
        raise KafkaProtocolError(f"{what}: {ErrorCode(code).name}", code=code)


@dataclass(eq=False)
class PendingMarker:
    """One partition's marker waiting for its owner's answer: `code` once answered, `failure`
    when the request that carried it failed."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    topic: str
    partition: int
    code: int | None = None
    failure: Exception | None = None

    @property
    def transaction(self) -> tuple[int, int, bool, int]:
        return self.producer_id, self.producer_epoch, self.commit, self.coordinator_epoch

    @property
    def answered(self) -> bool:
        return self.code is not None or self.failure is not None


class RemoteMarkerWriter:
    """Markers for other brokers' partitions, coalesced per owner into WriteTxnMarkers requests.

    The coordinator writes a transaction's markers one partition at a time, all at once, and
    many transactions end together; sending each as its own request would queue hundreds of
    requests behind each other.  Instead at most one WriteTxnMarkers is in flight per owner,
    and every marker that arrives meanwhile waits in that owner's queue: the next request
    carries them all (one entry per transaction, each with its topics and partitions, as
    Kafka's TransactionMarkerChannelManager drains its per-broker queue), and each caller gets
    its own partition's error.  A producer id appears once per request, so two markers of one
    producer keep their order.  A caller that gives up leaves the queue; if the caller sending
    a request is cancelled, the others' markers go back to the queue for the next sender."""

    def __init__(self, peers: PeerClient) -> None:
        self._peers = peers
        self._queues: dict[tuple[str, int], list[PendingMarker]] = {}
        self._senders: dict[tuple[str, int], trio.Lock] = {}
        self.requests_sent = 0  # WriteTxnMarkers requests, for tests and statistics

    async def write(self, owner: BrokerEndpoint, marker: PendingMarker) -> None:
        """Have `owner` append `marker`; raises its partition's error (or the request's)."""
        address = (owner.host, owner.port)
        queue = self._queues.setdefault(address, [])
        queue.append(marker)
        try:
            async with self._senders.setdefault(address, trio.Lock()):
                while not marker.answered:
                    await trio.lowlevel.checkpoint()  # markers of one EndTxn join the batch
                    if not marker.answered and marker not in queue:
                        queue.append(marker)  # the request that carried it was given up
                    await self._send(owner, queue, self._take_batch(queue))
        finally:
            if marker in queue:  # cancelled before any request carried it
                queue.remove(marker)
        what = f"marker for {marker.topic}-{marker.partition} on broker {owner.node_id}"
        if marker.failure is not None:
            code = getattr(marker.failure, "code", ErrorCode.COORDINATOR_NOT_AVAILABLE)
            raise KafkaProtocolError(f"{what}: {marker.failure}", code=code) from marker.failure
        assert marker.code is not None
        raise_for_partition_code(marker.code, what)

    @staticmethod
    def _take_batch(queue: list[PendingMarker]) -> list[PendingMarker]:
        """The queued markers, except a producer's second transaction (it waits its turn) and
        any beyond MAX_MARKERS_PER_REQUEST."""
        batch: list[PendingMarker] = []
        transaction_of: dict[int, tuple[int, int, bool, int]] = {}
        left: list[PendingMarker] = []
        for marker in queue:
            seen = transaction_of.setdefault(marker.producer_id, marker.transaction)
            fits = seen == marker.transaction and len(batch) < MAX_MARKERS_PER_REQUEST
            (batch if fits else left).append(marker)
        queue[:] = left
        return batch

    async def _send(self, owner: BrokerEndpoint, queue: list[PendingMarker],
                    batch: list[PendingMarker]) -> None:
        by_transaction: dict[tuple[int, int, bool, int], dict[str, list[PendingMarker]]] = {}
        for marker in batch:
            topics = by_transaction.setdefault(marker.transaction, {})
            topics.setdefault(marker.topic, []).append(marker)
        entries = [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [{"name": topic,
                                "partition_indexes": sorted({m.partition for m in markers})}
                               for topic, markers in topics.items()]}
                   for (pid, epoch, commit, coordinator_epoch), topics in by_transaction.items()]
        self.requests_sent += 1
        try:
            answer = await self._peers.request(owner.host, owner.port, WRITE_TXN_MARKERS, 1,
                                               {"markers": entries})
            codes: dict[tuple[int, str, int], int] = {}
            for index, answered in enumerate(answer.get("markers") or []):
                for topic in answered.get("topics") or []:
                    for part in topic.get("partitions") or []:
                        codes[(index, topic["name"], int(part["partition_index"]))] = \
                            int(part["error_code"])
        except trio.Cancelled:
            queue[:0] = batch  # the sender gave up; the next one sends them again
            raise
        except Exception as exc:  # noqa: BLE001 - each caller raises it; its retry loop decides
            for marker in batch:
                marker.failure = exc
            return
        index_of = {transaction: i for i, transaction in enumerate(by_transaction)}
        for marker in batch:  # a partition missing from the answer is an error, retried
            marker.code = codes.get((index_of[marker.transaction], marker.topic,
                                     marker.partition), int(ErrorCode.UNKNOWN_SERVER_ERROR))
