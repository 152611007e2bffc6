"""A topic's metadata node: the rules for its name and the JSON record it holds.

A topic is one node, /ledgerwire/topics/<name> (topic_service.TOPICS_PATH), holding JSON
{"format", "topic_id", "partitions", "configs"} and, while a deletion is under way,
"deleting": true.  `TopicInfo` is what the record says; `encode_topic` and `decode_topic` turn
one into the other (an unknown format is refused, never guessed at).  Names follow Kafka's
rules (org.apache.kafka.common.internals.Topic.validate).  Reading and writing the node, always by
compare-and-set on its version, is topic_service.py's.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from protocols.kafka.errors import InvalidTopicError

TOPIC_FORMAT_VERSION = 1
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def validate_topic_name(name: str) -> None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII alphanumerics, '.', '_' and '-'"
        )


def encode_topic(info: TopicInfo, deleting: bool = False) -> bytes:
    doc: dict[str, Any] = {"format": TOPIC_FORMAT_VERSION, "topic_id": str(info.topic_id),
                           "partitions": info.partitions, "configs": info.configs}
    if deleting:
        doc["deleting"] = True
    return json.dumps(doc, sort_keys=True).encode()


def decode_topic(name: str, data: bytes) -> tuple[TopicInfo, bool]:
    doc = json.loads(data)
    if doc.get("format") != TOPIC_FORMAT_VERSION:
        raise ValueError(f"topic {name}: unknown format {doc.get('format')}")
    info = TopicInfo(name, uuid.UUID(doc["topic_id"]), int(doc["partitions"]),
                     {str(k): str(v) for k, v in doc.get("configs", {}).items()})
    return info, bool(doc.get("deleting", False))
