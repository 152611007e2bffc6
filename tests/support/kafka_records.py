"""A record consumed with confluent-kafka, typed.

The client types every field of a Message as optional (a Message may be an error event, with
no partition or offset); a record consumed without error has its partition and offset.  Test
code takes them through `consumed`, which checks that once."""

from __future__ import annotations

from confluent_kafka import Message


def position(msg: Message) -> tuple[int, int]:
    """(partition, offset) of a record consumed without error."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None, msg.error()
    return partition, offset


def header_list(msg: Message) -> list[tuple[str, bytes]] | None:
    """The record's headers as (name, bytes) pairs (None without headers)."""
    headers = msg.headers()
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(name, value if isinstance(value, bytes) else (value or "").encode())
            for name, value in pairs]
