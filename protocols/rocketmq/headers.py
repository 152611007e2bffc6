"""Typed views of request extFields: lenient parsing of the forms real clients send.

Java sends every value as a string; the C++ client and ali-ons send JSON numbers and "0"/"1"
or true/false for booleans (the codec already turned all of them into strings).  A missing
required field or a value that is not a number is a `MessageIllegalError`-style error the
dispatcher answers; it never crashes the connection.

This module must never do I/O or touch broker state.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocols.rocketmq.errors import RocketMQError

# SEND_MESSAGE_V2 abbreviates the SendMessageRequestHeader fields a..n
SEND_V2_FIELDS = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    "n": "brokerName",
}


class HeaderFieldError(RocketMQError):
    """A required header field is missing or unparsable (answered as SYSTEM_ERROR, like Java)."""


def ext_required(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None:
        raise HeaderFieldError(f"the custom field <{name}> is null")
    return value


def ext_int(ext: dict[str, str], name: str, default: int | None = None) -> int:
    value = ext.get(name)
    if value is None or value == "":
        if default is None:
            raise HeaderFieldError(f"the custom field <{name}> is null")
        return default
    try:
        return int(value)
    except ValueError:
        try:
            as_float = float(value)
        except ValueError:
            as_float = float("nan")
        if as_float.is_integer():
            return int(as_float)
        raise HeaderFieldError(f"the custom field <{name}> is not a number: {value!r}") from None


def ext_bool(ext: dict[str, str], name: str, default: bool = False) -> bool:
    value = ext.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("true", "1")


def normalise_send_header(ext: dict[str, str]) -> dict[str, str]:
    """SEND_MESSAGE_V2's a..n fields under their SEND_MESSAGE names."""
    return {SEND_V2_FIELDS.get(k, k): v for k, v in ext.items()}


_SEND_LONG_NAMES = frozenset(SEND_V2_FIELDS.values())
_SEND_V1_KEYS = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                 "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes",
                 "maxReconsumeTimes", "batch")
_SEND_V2_KEYS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "m")


def _int_or(value: str | None, name: str, default: int) -> int:
    """ext_int's rule for one value already looked up (the common case: a plain integer)."""
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        return ext_int({name: value}, name, default)


@dataclass(frozen=True, slots=True)
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int
    batch: bool

    @classmethod
    def parse(cls, ext: dict[str, str], *, v2: bool) -> SendHeader:
        # A send's header is read on every message: look the fields up directly, unless a V2
        # header also carries long names (then normalising decides which one counts).
        if v2 and _SEND_LONG_NAMES.isdisjoint(ext):
            keys = _SEND_V2_KEYS
        elif not v2:
            keys = _SEND_V1_KEYS
        else:
            return cls._parse_named(normalise_send_header(ext))
        (group, topic, default_topic, queue_nums, queue_id, sys_flag, born, flag, props,
         reconsume, max_reconsume, batch) = map(ext.get, keys)
        if topic is None:
            raise HeaderFieldError("the custom field <topic> is null")
        try:  # plain integers (every client's): no call per field
            numbers = (int(queue_nums) if queue_nums else 4, int(queue_id) if queue_id else -1,
                       int(sys_flag) if sys_flag else 0, int(born) if born else 0,
                       int(flag) if flag else 0, int(reconsume) if reconsume else 0,
                       int(max_reconsume) if max_reconsume else -1)
        except ValueError:  # "1.0" and the like, or an error naming the field
            numbers = (_int_or(queue_nums, "defaultTopicQueueNums", 4),
                       _int_or(queue_id, "queueId", -1), _int_or(sys_flag, "sysFlag", 0),
                       _int_or(born, "bornTimestamp", 0), _int_or(flag, "flag", 0),
                       _int_or(reconsume, "reconsumeTimes", 0),
                       _int_or(max_reconsume, "maxReconsumeTimes", -1))
        queue_nums_i, queue_id_i, sys_flag_i, born_i, flag_i, reconsume_i, max_i = numbers
        return cls(
            producer_group=group if group is not None else "",
            topic=topic,
            default_topic=default_topic if default_topic is not None else "",
            default_topic_queue_nums=queue_nums_i,
            queue_id=queue_id_i,
            sys_flag=sys_flag_i,
            born_timestamp=born_i,
            flag=flag_i,
            properties=props if props is not None else "",
            reconsume_times=reconsume_i,
            max_reconsume_times=max_i,
            batch=batch is not None and batch.strip().lower() in ("true", "1"),
        )

    @classmethod
    def _parse_named(cls, f: dict[str, str]) -> SendHeader:
        return cls(
            producer_group=f.get("producerGroup", ""),
            topic=ext_required(f, "topic"),
            default_topic=f.get("defaultTopic", ""),
            default_topic_queue_nums=ext_int(f, "defaultTopicQueueNums", 4),
            queue_id=ext_int(f, "queueId", -1),
            sys_flag=ext_int(f, "sysFlag", 0),
            born_timestamp=ext_int(f, "bornTimestamp", 0),
            flag=ext_int(f, "flag", 0),
            properties=f.get("properties", ""),
            reconsume_times=ext_int(f, "reconsumeTimes", 0),
            max_reconsume_times=ext_int(f, "maxReconsumeTimes", -1),
            batch=ext_bool(f, "batch"),
        )


# PullMessageRequestHeader.sysFlag bits
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8


@dataclass(frozen=True, slots=True)
class PullHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int
    subscription: str | None
    expression_type: str

    @classmethod
    def parse(cls, ext: dict[str, str]) -> PullHeader:
        return cls(
            consumer_group=ext_required(ext, "consumerGroup"),
            topic=ext_required(ext, "topic"),
            queue_id=ext_int(ext, "queueId"),
            queue_offset=ext_int(ext, "queueOffset"),
            max_msg_nums=ext_int(ext, "maxMsgNums", 32),
            sys_flag=ext_int(ext, "sysFlag", 0),
            commit_offset=ext_int(ext, "commitOffset", -1),
            suspend_timeout_ms=ext_int(ext, "suspendTimeoutMillis", 0),
            subscription=ext.get("subscription"),
            expression_type=ext.get("expressionType", "TAG") or "TAG",
        )
