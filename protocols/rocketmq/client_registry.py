"""Which clients are connected, what they subscribe to, and which queues orderly consumers lock.

Pure state (time is passed in): heartbeats register a client's producer and consumer groups and
its subscriptions on the connection the heartbeat came on; a closed connection, an
UNREGISTER_CLIENT or a missing heartbeat (after `client_expiry_s`) removes it.  Every change of a
consumer group's membership is returned so the caller can send NOTIFY_CONSUMER_IDS_CHANGED.
Queue locks (LOCK_BATCH_MQ) belong to one client id per (group, topic, broker, queue) and expire
unless renewed.

This module must never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocols.rocketmq.subscription import TagFilter, parse_tag_expression


@dataclass
class ConsumerGroupMember:
    client_id: str
    connection: Any
    subscriptions: dict[str, TagFilter]
    consume_type: str
    message_model: str
    last_seen: float


@dataclass
class ProducerMember:
    client_id: str
    connection: Any
    last_seen: float


@dataclass
class _Lock:
    client_id: str
    expires: float


MessageQueueKey = tuple[str, str, int]  # topic, broker name, queue id


@dataclass
class ClientRegistry:
    client_expiry_s: float = 120.0
    lock_expiry_s: float = 60.0
    consumer_groups: dict[str, dict[str, ConsumerGroupMember]] = field(default_factory=dict)
    producer_groups: dict[str, dict[str, ProducerMember]] = field(default_factory=dict)
    _locks: dict[tuple[str, MessageQueueKey], _Lock] = field(default_factory=dict)

    # --- membership -------------------------------------------------------------------------

    def heartbeat(self, connection: Any, data: dict[str, Any], now: float) -> set[str]:
        """Apply a HEART_BEAT body; returns the consumer groups whose member list changed."""
        client_id = str(data.get("clientID") or "")
        changed: set[str] = set()
        for producer in data.get("producerDataSet") or []:
            group = str(producer.get("groupName") or "")
            if group:
                self.producer_groups.setdefault(group, {})[client_id] = ProducerMember(
                    client_id, connection, now)
        for consumer in data.get("consumerDataSet") or []:
            group = str(consumer.get("groupName") or "")
            if not group:
                continue
            subs: dict[str, TagFilter] = {}
            for sub in consumer.get("subscriptionDataSet") or []:
                topic = str(sub.get("topic") or "")
                if topic:
                    subs[topic] = parse_tag_expression(str(sub.get("subString") or "*"),
                                                       str(sub.get("expressionType") or "TAG"))
            members = self.consumer_groups.setdefault(group, {})
            if client_id not in members:
                changed.add(group)
            members[client_id] = ConsumerGroupMember(
                client_id, connection, subs, str(consumer.get("consumeType", "")),
                str(consumer.get("messageModel", "")), now)
        return changed

    def unregister(self, client_id: str, producer_group: str | None,
                   consumer_group: str | None) -> set[str]:
        changed: set[str] = set()
        if producer_group:
            self.producer_groups.get(producer_group, {}).pop(client_id, None)
        if consumer_group and self.consumer_groups.get(consumer_group, {}).pop(client_id, None):
            changed.add(consumer_group)
            self._release_locks(consumer_group, client_id)
        return changed

    def connection_closed(self, connection: Any) -> set[str]:
        changed: set[str] = set()
        for group, members in self.consumer_groups.items():
            for client_id, member in list(members.items()):
                if member.connection is connection:
                    del members[client_id]
                    changed.add(group)
                    self._release_locks(group, client_id)
        for producers in self.producer_groups.values():
            for client_id, producer in list(producers.items()):
                if producer.connection is connection:
                    del producers[client_id]
        return changed

    def expire(self, now: float) -> set[str]:
        changed: set[str] = set()
        for group, members in self.consumer_groups.items():
            for client_id, member in list(members.items()):
                if now - member.last_seen > self.client_expiry_s:
                    del members[client_id]
                    changed.add(group)
                    self._release_locks(group, client_id)
        for producers in self.producer_groups.values():
            for client_id, producer in list(producers.items()):
                if now - producer.last_seen > self.client_expiry_s:
                    del producers[client_id]
        return changed

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self.consumer_groups.get(group, {}))

    def consumer_connections(self, group: str) -> list[Any]:
        return [m.connection for m in self.consumer_groups.get(group, {}).values()]

    def producer_connections(self, group: str) -> list[Any]:
        return [m.connection for m in self.producer_groups.get(group, {}).values()]

    def subscription(self, group: str, topic: str) -> TagFilter | None:
        """The group's subscription to `topic` (from any live member's heartbeat)."""
        for member in self.consumer_groups.get(group, {}).values():
            found = member.subscriptions.get(topic)
            if found is not None:
                return found
        return None

    # --- orderly-consumption locks ----------------------------------------------------------

    def lock_batch(self, group: str, client_id: str, queues: list[MessageQueueKey],
                   now: float) -> list[MessageQueueKey]:
        locked: list[MessageQueueKey] = []
        for mq in queues:
            key = (group, mq)
            held = self._locks.get(key)
            if held is None or held.client_id == client_id or held.expires <= now:
                self._locks[key] = _Lock(client_id, now + self.lock_expiry_s)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, client_id: str, queues: list[MessageQueueKey]) -> None:
        for mq in queues:
            held = self._locks.get((group, mq))
            if held is not None and held.client_id == client_id:
                del self._locks[(group, mq)]

    def lock_owner(self, group: str, mq: MessageQueueKey, now: float) -> str | None:
        held = self._locks.get((group, mq))
        if held is None or held.expires <= now:
            return None
        return held.client_id

    def _release_locks(self, group: str, client_id: str) -> None:
        for key, held in list(self._locks.items()):
            if key[0] == group and held.client_id == client_id:
                del self._locks[key]
