"""Finding topics and partitions for the handlers, with Kafka's errors for the missing ones.

Every handler that names a topic goes through here, so "unknown topic", "unknown partition",
"unknown topic id" and "illegal topic name" mean the same thing in every API.

This module must never create or change topics: it only looks them up and validates names.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from protocols.kafka.broker_api import PartitionLogApi, RequestContext
from protocols.kafka.errors import (
    InvalidTopicError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> str:
    """Kafka's topic name rules (Topic.validate); returns the name or raises InvalidTopicError."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return name


def topic_info(ctx: RequestContext, name: str | None) -> Any | None:
    """The TopicInfo of `name`, or None."""
    if name is None:
        return None
    return ctx.topics.topics().get(name)


def topic_by_id(ctx: RequestContext, topic_id: uuid.UUID | None) -> Any | None:
    """The TopicInfo whose id is `topic_id`, or None (the zero uuid never matches)."""
    if topic_id is None or topic_id.int == 0:
        return None
    for info in ctx.topics.topics().values():
        if info.topic_id == topic_id:
            return info
    return None


def require_topic_id(ctx: RequestContext, topic_id: uuid.UUID | None) -> Any:
    info = topic_by_id(ctx, topic_id)
    if info is None:
        raise UnknownTopicIdError(f"unknown topic id {topic_id}")
    return info


async def open_partition(ctx: RequestContext, topic: str | None, partition: int) -> PartitionLogApi:
    """The partition log of `topic`/`partition`; UnknownTopicOrPartitionError when absent."""
    info = topic_info(ctx, topic)
    if info is None or topic is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
    if not 0 <= partition < info.partitions:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    return await ctx.topics.partition(topic, partition)
