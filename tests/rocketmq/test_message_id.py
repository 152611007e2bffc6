"""Offset message ids: the cached host/port prefix gives the bytes RocketMQ's layout packs (store
IPv4, port, commit-log offset as upper-case hex), for any host, port and offset."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from protocols.rocketmq.message_id import (
    commit_log_offset,
    decode_commit_log_offset,
    decode_offset_message_id,
    offset_message_id,
)

_LAYOUT = struct.Struct(">4siq")


@given(st.ip_addresses(v=4).map(str) | st.sampled_from(["localhost", "", "broker-1"]),
       st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_offset_message_id_is_the_packed_layout(host: str, port: int, offset: int) -> None:
    try:
        ip = bytes(int(part) for part in host.split(".")) if host.count(".") == 3 else None
    except ValueError:
        ip = None
    expected = _LAYOUT.pack(ip or b"\x7f\x00\x00\x01", port, offset).hex().upper()
    assert offset_message_id(host, port, offset) == expected


@given(st.integers(0, 4095), st.integers(0, 2**36 - 1), st.text(min_size=1, max_size=20))
def test_a_sends_id_decodes_to_its_queue_and_offset(queue_id: int, offset: int,
                                                    topic: str) -> None:  # fmt: skip
    message_id = offset_message_id("10.0.0.7", 10911,
                                   commit_log_offset(topic, queue_id, offset))
    host, port, clo = decode_offset_message_id(message_id)
    assert (host, port) == ("10.0.0.7", 10911)
    location = decode_commit_log_offset(clo)
    assert (location.queue_id, location.queue_offset) == (queue_id, offset)
