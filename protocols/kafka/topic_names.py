"""Kafka's rule for a topic's name, the one every part of the broker applies.

After org.apache.kafka.common.internals.Topic.validate: not empty, not "." or "..", at most
249 characters, only ASCII alphanumerics, '.', '_' and '-'.  The Kafka handlers check names a
request carries (topic_lookup.py); the topic service checks a name before it creates the topic
(gateway/topics/topic_service.py), whichever front asked.  The messages are Kafka's own.

Pure: this module must never look anything up; it only judges a string.
"""

from __future__ import annotations

import re

from protocols.kafka.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str | None) -> str:
    """The name if Kafka allows it; else InvalidTopicError."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return name
