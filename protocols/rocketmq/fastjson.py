"""The JSON dialect of RocketMQ bodies: fastjson's output, where a map keyed by an object is
written with that object itself as the key.

Java brokers serialise bodies with fastjson (`RemotingSerializable.encode` ->
`JSON.toJSONString`).  For a `Map` whose key is not a String (TopicStatsTable, ConsumeStats and
ResetOffsetBody are keyed by `MessageQueue`), fastjson's MapSerializer writes the key object
as it writes any bean, so the body is

    {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":1,...}}}

which is not standard JSON; fastjson (mqadmin, the console, the Java client) parses exactly
that form back into `HashMap<MessageQueue, ...>`.  Numeric keys are written bare (`{0:"a"}`).
Bean properties come out sorted by name (fastjson's default SortField feature), which the
`*_bean` helpers of the handlers follow.

`dumps` writes that dialect; `loads` reads it (object keys come back as `ObjectKey`, or as
`MessageQueue` when they have exactly its three properties) — the tests use it to read what the
broker answers the way fastjson would.

This module must never do I/O.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["MessageQueue", "ObjectKey", "dumps", "dumps_bytes", "loads"]


@dataclass(frozen=True, order=True)
class MessageQueue:
    """org.apache.rocketmq.common.message.MessageQueue (a map key in many admin bodies)."""

    topic: str
    broker_name: str
    queue_id: int

    def bean(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


@dataclass(frozen=True)
class ObjectKey:
    """A map key that is an object other than a MessageQueue: its properties, in order."""

    items: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)


_MQ_FIELDS = frozenset({"brokerName", "queueId", "topic"})


def dumps(value: object) -> str:
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def dumps_bytes(value: object) -> bytes:
    return dumps(value).encode("utf-8")


def _write(value: object, out: list[str]) -> None:
    if value is None or isinstance(value, (bool, str)):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        # fastjson writes a non-finite double as null
        out.append(repr(value) if math.isfinite(value) else "null")
    elif isinstance(value, MessageQueue):
        _write(value.bean(), out)
    elif isinstance(value, ObjectKey):
        _write(value.as_dict(), out)
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            if isinstance(key, str):
                out.append(json.dumps(key, ensure_ascii=False))
            elif isinstance(key, (bool, int, float, MessageQueue, ObjectKey)):
                _write(key, out)
            else:
                raise TypeError(f"cannot write a map key of type {type(key).__name__}")
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


class FastjsonDecodeError(ValueError):
    """The text is not in fastjson's dialect."""


def loads(text: str | bytes) -> Any:
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    parser = _Parser(text)
    try:
        value = parser.value()
    except RecursionError as exc:  # nesting deeper than Python's stack: not fastjson's dialect
        raise FastjsonDecodeError("nested too deeply") from exc
    parser.skip_ws()
    if parser.pos != len(text):
        raise FastjsonDecodeError(f"extra data at {parser.pos}")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._decoder = json.JSONDecoder()

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def value(self) -> Any:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise FastjsonDecodeError("unexpected end")
        ch = self.text[self.pos]
        if ch == "{":
            return self._object()
        if ch == "[":
            return self._array()
        try:
            found, end = self._decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise FastjsonDecodeError(str(exc)) from exc
        self.pos = end
        return found

    def _expect(self, ch: str) -> None:
        self.skip_ws()
        if self.pos >= len(self.text) or self.text[self.pos] != ch:
            raise FastjsonDecodeError(f"expected {ch!r} at {self.pos}")
        self.pos += 1

    def _peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _object(self) -> dict[Any, Any]:
        self._expect("{")
        result: dict[Any, Any] = {}
        if self._peek() == "}":
            self.pos += 1
            return result
        while True:
            key = self.value()
            if isinstance(key, dict):
                key = _as_key(key)
            elif isinstance(key, list):
                raise FastjsonDecodeError("an array cannot be a map key")
            self._expect(":")
            result[key] = self.value()
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("}")
            return result

    def _array(self) -> list[Any]:
        self._expect("[")
        result: list[Any] = []
        if self._peek() == "]":
            self.pos += 1
            return result
        while True:
            result.append(self.value())
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("]")
            return result


def _as_key(obj: dict[Any, Any]) -> MessageQueue | ObjectKey:
    if set(obj) == _MQ_FIELDS:
        return MessageQueue(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
    return ObjectKey(tuple((str(k), v) for k, v in obj.items()))
