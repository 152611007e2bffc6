"""A topic's metadata node: the JSON record it holds.

A topic is one node, /ledgerwire/topics/<name> (topic_store.TOPICS_PATH), holding JSON
{"format", "topic_id", "partitions", "configs"} and, while a deletion is under way,
"deleting": true.  `TopicInfo` is what the record says; `encode_topic` and `decode_topic` turn
one into the other (an unknown format is refused, never guessed at).  Reading and writing the
node, always by compare-and-set on its version, is topic_store.py's; the rule for its name is
Kafka's, in protocols/kafka/topic_names.py.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

TOPIC_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


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
