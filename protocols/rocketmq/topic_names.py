"""RocketMQ topic names <-> ledgerwire (Kafka-legal) topic names.

RocketMQ names match [%|a-zA-Z0-9_-]+ and system topics contain '%' (%RETRY%group, %DLQ%group);
Kafka names match [a-zA-Z0-9._-]+.  RocketMQ names never contain '.', so '%' -> '.' is
injective on them ('|' is refused).  A Kafka topic with dots is seen by RocketMQ clients with
'%' in place of each dot.

This module must never do I/O.
"""

from __future__ import annotations

import functools
import re

from protocols.rocketmq.errors import MessageIllegalError

MAX_TOPIC_LENGTH = 127
_LEGAL = re.compile(r"[%a-zA-Z0-9_-]+")

DEFAULT_TOPIC = "TBW102"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


# RocketMQ's own system topics (its TopicValidator set) and prefixes, as stored here: the
# schedule and transaction topics, retry topics (%RETRY%g, stored .RETRY.g).  DLQ topics are
# not internal (applications read them), as in RocketMQ.
SYSTEM_TOPICS = frozenset({DEFAULT_TOPIC, SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC,
                           "BenchmarkTest", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
                           "OFFSET_MOVED_EVENT"})
SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", RETRY_PREFIX.replace("%", "."))


# Topics whose messages name another topic to be delivered to (REAL_TOPIC): only the broker
# writes them, as Apache's TopicValidator forbids sending to them (a client that could would
# deliver into any topic through them).
NOT_SENDABLE_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC})


def is_internal_topic(stored_name: str) -> bool:
    """Is this stored topic one of RocketMQ's own (hidden from listings, Kafka is_internal)?"""
    return stored_name in SYSTEM_TOPICS or stored_name.startswith(SYSTEM_PREFIXES)


def validate_topic(topic: str) -> None:
    if not topic:
        raise MessageIllegalError("the specified topic is blank")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageIllegalError(f"the specified topic is longer than {MAX_TOPIC_LENGTH}")
    if not _LEGAL.fullmatch(topic):
        raise MessageIllegalError(
            f"the specified topic[{topic}] contains illegal characters, allowing only "
            "^[%a-zA-Z0-9_-]+$")


@functools.lru_cache(maxsize=4096)  # read on every request that names a topic
def to_storage(topic: str) -> str:
    validate_topic(topic)  # a refused name raises: never cached
    return topic.replace("%", ".")


def from_storage(name: str) -> str:
    return name.replace(".", "%")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
