"""Kafka's topic name rule (protocols/kafka/topic_names.py), the one the handlers, the topic
service and the admin console all apply."""

from __future__ import annotations

import pytest

from protocols.kafka.errors import InvalidTopicError
from protocols.kafka.topic_names import MAX_TOPIC_NAME_LENGTH, validate_topic_name


@pytest.mark.parametrize(
    "name", ["a", "a.b_c-1", "A" * MAX_TOPIC_NAME_LENGTH, "..x", "__consumer_offsets"])
def test_legal_names_are_returned(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", [
    None, "", ".", "..", "a" * (MAX_TOPIC_NAME_LENGTH + 1), "has space", "slash/no", "ünï",
    "trailing\n",  # a `$`-anchored re.match let this through
])
def test_illegal_names_are_refused(name: str | None) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_messages_are_kafkas() -> None:
    with pytest.raises(InvalidTopicError, match="can't be longer than 249 characters"):
        validate_topic_name("x" * 250)
    with pytest.raises(InvalidTopicError, match="contains a character other than"):
        validate_topic_name("a/b")
