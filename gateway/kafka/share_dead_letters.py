"""Where Kafka share groups' dead letters are written (share.dead.letter.topic): partition 0 of
the group's dead-letter topic, created with one partition on first use.

`LocalDeadLetters` appends through this process's topic service (standalone).  In a cluster the
partition may be owned by another broker: `ClusterDeadLetters` appends locally only while this
broker owns it (and reports a failure if the ownership moved during the append), otherwise it
sends a Produce (acks=all) to the owner over the inter-broker client, retrying for a few
seconds while the owner does not know a just-created topic yet.

This module must never report an append as done before it is durable on the partition's
owner, and never open a partition this broker does not own (opening fences the owner).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import trio

from protocols.kafka.errors import ErrorCode, KafkaProtocolError, NotLeaderOrFollowerError

log = logging.getLogger("ledgerwire.kafka.share_dead_letters")

PRODUCE, PRODUCE_VERSION = 0, 9
PEER_ATTEMPTS, PEER_RETRY_S = 6, 0.5
# answers of an owner that does not know the new topic (or the partition) yet
_NOT_YET = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                      ErrorCode.LEADER_NOT_AVAILABLE})
DEAD_LETTER_PARTITION = 0


class DeadLetterSink(Protocol):
    async def append(self, topic: str, batch: bytes) -> None:
        """Append one record batch to the dead-letter topic's partition 0, durably."""
        ...


async def _ensure_topic(topics: Any, topic: str) -> None:
    if topic in topics.topics():
        return
    try:
        await topics.create_topic(topic, 1)
    except Exception as exc:  # noqa: BLE001 - made meanwhile; else the append says why
        log.debug("dead-letter topic %s not created here: %r", topic, exc)


class LocalDeadLetters:
    def __init__(self, topics: Any) -> None:
        self._topics = topics  # gateway.topics.TopicService

    async def append(self, topic: str, batch: bytes) -> None:
        await _ensure_topic(self._topics, topic)
        plog = await self._topics.partition(topic, DEAD_LETTER_PARTITION)
        await plog.append(batch)


class ClusterDeadLetters:
    def __init__(self, topics: Any, ownership: Any, peers: Any) -> None:
        self._topics = topics  # gateway.topics.TopicService
        self._ownership = ownership  # gateway.cluster.ownership.OwnershipService
        self._peers = peers  # gateway.cluster.peer_client.PeerClient

    async def append(self, topic: str, batch: bytes) -> None:
        await _ensure_topic(self._topics, topic)
        if self._ownership.is_local(topic, DEAD_LETTER_PARTITION):
            plog = await self._topics.partition(topic, DEAD_LETTER_PARTITION)
            await plog.append(batch)
            if not self._ownership.is_local(topic, DEAD_LETTER_PARTITION):
                raise NotLeaderOrFollowerError(f"{topic}-0 moved away during the append")
            return
        for attempt in range(PEER_ATTEMPTS):
            owner = self._ownership.owner_of(topic, DEAD_LETTER_PARTITION)
            if owner is None:
                raise NotLeaderOrFollowerError(f"{topic}-0 has no owner yet")
            answer = await self._peers.request(owner.host, owner.port, PRODUCE, PRODUCE_VERSION, {
                "transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": DEAD_LETTER_PARTITION, "records": batch}]}]})
            code = int(answer["responses"][0]["partition_responses"][0]["error_code"])
            if not code:
                return
            if code not in _NOT_YET or attempt == PEER_ATTEMPTS - 1:
                raise KafkaProtocolError(f"broker {owner.node_id} refused the dead letters of "
                                         f"{topic}: {ErrorCode(code).name}",
                                         code=ErrorCode(code))
            await trio.sleep(PEER_RETRY_S)  # a topic just created: the owner learns it soon
