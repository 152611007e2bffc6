"""What admin answers need to know about a client beyond its membership: the language and
version its requests carry, and the raw consumer data of its last heartbeat.

GET_CONSUMER_CONNECTION_LIST / GET_PRODUCER_CONNECTION_LIST report each connection's language
and version (from the remoting header of its heartbeats) and the group's consumeFromWhere and
subscriptions as the client sent them; RESET_CONSUMER_CLIENT_OFFSET must be written in the form
the receiving client parses (C++ clients read `ResetOffsetBodyForC`, a list, because jsoncpp
cannot read fastjson's object-keyed maps).  Entries are keyed by the connection object weakly,
so a closed connection leaves nothing behind.

This module must never do I/O.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

# enum orders shared by the Java and C++ clients (C++ heartbeats send ordinals)
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP")


def enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    """A Java enum constant name from a heartbeat value given by name or by ordinal."""
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        index = int(value)
        return names[index] if 0 <= index < len(names) else default
    text = str(value)
    return text if text in names else default


@dataclass
class ConsumerGroupData:
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[dict[str, Any]]


@dataclass
class ConnectionDetails:
    language: str = "JAVA"
    version: int = 0
    consumer_groups: dict[str, ConsumerGroupData] = field(default_factory=dict)

    @property
    def is_cpp(self) -> bool:
        return self.language.upper() == "CPP"


class ClientDetails:
    def __init__(self) -> None:
        self._by_connection: weakref.WeakKeyDictionary[Any, ConnectionDetails] = (
            weakref.WeakKeyDictionary())

    def record_heartbeat(self, connection: Any, language: str, version: int,
                         data: object) -> None:
        details = ConnectionDetails(language or "JAVA", int(version))
        groups = data.get("consumerDataSet") if isinstance(data, dict) else None
        for consumer in groups or []:
            if not isinstance(consumer, dict) or not consumer.get("groupName"):
                continue
            subs = [s for s in consumer.get("subscriptionDataSet") or [] if isinstance(s, dict)]
            details.consumer_groups[str(consumer["groupName"])] = ConsumerGroupData(
                enum_name(consumer.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                enum_name(consumer.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                enum_name(consumer.get("consumeFromWhere"), CONSUME_FROM_WHERE,
                          "CONSUME_FROM_LAST_OFFSET"),
                subs)
        try:
            self._by_connection[connection] = details
        except TypeError:  # a connection that cannot be weakly referenced: nothing to keep
            pass

    def of(self, connection: Any) -> ConnectionDetails:
        try:
            return self._by_connection.get(connection) or ConnectionDetails()
        except TypeError:
            return ConnectionDetails()
