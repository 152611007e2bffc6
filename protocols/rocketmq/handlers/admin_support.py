"""What the admin/statistics handlers share: optional broker capabilities, store timestamps,
and the Java beans their bodies are made of (fields in fastjson's sorted order).

Not every broker has every capability (a cluster bundle broker keeps no subscription groups
yet, and its offset stores cannot be listed): `capability` answers a clear error then instead
of an AttributeError.

This module must never write to a partition or to the offset store.
"""

from __future__ import annotations

from typing import Any, cast

from protocols.kafka.errors import KafkaProtocolError
from protocols.rocketmq.broker_api import (
    BrokerLike,
    ListableOffsetsLike,
    PartitionLogLike,
    SubscriptionGroupStoreLike,
    TopicInfoLike,
)
from protocols.rocketmq.broker_stats import BrokerStats
from protocols.rocketmq.client_details import ClientDetails
from protocols.rocketmq.errors import ServiceNotAvailableError
from protocols.rocketmq.handlers.common import iter_records, stored_message
from protocols.rocketmq.message_id import MAX_QUEUES
from protocols.rocketmq.subscription import TagFilter

READ_FOR_TIMESTAMP_BYTES = 64 * 1024


def queue_count(info: TopicInfoLike) -> int:
    """The queues RocketMQ clients can address (message ids carry the queue id in few bits)."""
    return min(info.partitions, MAX_QUEUES)


def capability(broker: BrokerLike, name: str) -> Any:
    found = getattr(broker, name, None)
    if found is None:
        raise ServiceNotAvailableError(f"{name.replace('_', ' ')} are not available on this "
                                       "broker")
    return found


def subscription_groups(broker: BrokerLike) -> SubscriptionGroupStoreLike:
    return cast(SubscriptionGroupStoreLike, capability(broker, "subscription_groups"))


def client_details(broker: BrokerLike) -> ClientDetails:
    found = getattr(broker, "client_details", None)
    return found if isinstance(found, ClientDetails) else ClientDetails()


def broker_stats(broker: BrokerLike) -> BrokerStats | None:
    found = getattr(broker, "broker_stats", None)
    return found if isinstance(found, BrokerStats) else None


def listable_offsets(broker: BrokerLike) -> ListableOffsetsLike | None:
    offsets = broker.offsets
    if callable(getattr(offsets, "committed", None)) and callable(getattr(offsets, "groups",
                                                                          None)):
        return cast(ListableOffsetsLike, offsets)
    return None


def committed_offsets(broker: BrokerLike, group: str) -> dict[tuple[str, int], int]:
    """(RocketMQ topic, queue id) -> committed offset of `group` ({} if not listable)."""
    offsets = listable_offsets(broker)
    return offsets.committed(group) if offsets is not None else {}


def groups_with_offsets(broker: BrokerLike) -> list[str]:
    offsets = listable_offsets(broker)
    return offsets.groups() if offsets is not None else []


async def store_timestamp(broker: BrokerLike, storage_topic: str, queue_id: int,
                          plog: PartitionLogLike, offset: int) -> int:
    """Store time (ms) of the message at `offset`; 0 if it is gone or unreadable."""
    if offset < plog.log_start_offset or offset >= plog.high_watermark:
        return 0
    try:
        batches = await plog.read(offset, READ_FOR_TIMESTAMP_BYTES)
    except KafkaProtocolError:
        return 0
    for record in iter_records(batches, offset):
        if record.offset != offset:
            return 0
        return stored_message(broker, storage_topic, queue_id, record).store_timestamp
    return 0


# --- beans -----------------------------------------------------------------------------------

def connection_bean(client_id: str, connection: Any, details: ClientDetails) -> dict[str, object]:
    peer = getattr(connection, "peer", ("", 0))
    info = details.of(connection)
    return {"clientAddr": f"{peer[0]}:{peer[1]}", "clientId": client_id,
            "language": info.language, "version": info.version}


def subscription_bean(topic: str, raw: dict[str, Any] | None,
                      parsed: TagFilter | None) -> dict[str, object]:
    """SubscriptionData as the client sent it (fields Java and C++ heartbeats may leave out
    are filled from the parsed filter)."""
    raw = raw or {}
    tags = sorted(parsed.tags) if parsed is not None and parsed.tags is not None else []
    codes = parsed.codes if parsed is not None else []
    return {
        "classFilterMode": bool(raw.get("classFilterMode", False)),
        "codeSet": list(raw.get("codeSet") or codes),
        "expressionType": str(raw.get("expressionType") or "TAG"),
        "subString": str(raw.get("subString") or (parsed.expression if parsed else "*")),
        "subVersion": _as_int(raw.get("subVersion")),
        "tagsSet": list(raw.get("tagsSet") or tags),
        "topic": topic,
    }


def _as_int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return 0
