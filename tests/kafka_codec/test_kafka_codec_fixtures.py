"""Hand-assembled golden bytes for the (api, version) pairs no third-party encoder here covers:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) are absent from kafka-python 3, and
WriteTxnMarkers v0 was dropped by Kafka 4.0.  Each fixture is written byte by byte from the
spec's field list, independently of the table."""

from __future__ import annotations

import struct
import uuid

from protocols.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def cstr(text: str | None) -> bytes:
    """Compact (nullable) string."""
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


HEARTBEAT_V0_REQUEST = (
    struct.pack(">hhi", 68, 0, 11) + b"\x00\x04rdkc" + b"\x00"  # header v2, ClientId int16
    + cstr("g1") + cstr("m-1") + i32(3)  # group, member, member epoch
    + cstr(None) + cstr("rack-a") + i32(45000)  # instance id null, rack, rebalance timeout
    + b"\x03" + cstr("t1") + cstr("t2")  # subscribed topic names
    + cstr("uniform")  # server assignor
    + b"\x02" + TOPIC_ID.bytes + b"\x03" + i32(0, 1) + b"\x00"  # one owned topic, partitions
    + b"\x00"  # request tagged fields
)  # fmt: skip


def test_consumer_group_heartbeat_v0_request_fixture() -> None:
    header, body = decode_request(HEARTBEAT_V0_REQUEST)
    assert header == RequestHeader(68, 0, 11, "rdkc")
    assert body["group_id"] == "g1" and body["member_id"] == "m-1" and body["member_epoch"] == 3
    assert body["instance_id"] is None and body["rack_id"] == "rack-a"
    assert body["rebalance_timeout_ms"] == 45000
    assert body["subscribed_topic_names"] == ["t1", "t2"]
    assert body["subscribed_topic_regex"] is None  # v1+ only: default
    assert body["server_assignor"] == "uniform"
    assert body["topic_partitions"] == [{"topic_id": TOPIC_ID, "partitions": [0, 1]}]
    assert encode_request(header, body)[4:] == HEARTBEAT_V0_REQUEST


def test_consumer_group_heartbeat_v0_response_fixture() -> None:
    body = {
        "error_code": 0,
        "member_id": "m-1",
        "member_epoch": 4,
        "heartbeat_interval_ms": 5000,
        "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [2]}]},
    }
    expected = (
        i32(11) + b"\x00"  # response header v1
        + i32(0) + b"\x00\x00" + cstr(None) + cstr("m-1") + i32(4, 5000)
        + b"\x01"  # nullable struct present
        + b"\x02" + TOPIC_ID.bytes + b"\x02" + i32(2) + b"\x00"  # topic partitions
        + b"\x00"  # assignment tagged fields
        + b"\x00"  # body tagged fields
    )  # fmt: skip
    frame = encode_response(RequestHeader(68, 0, 11, "rdkc"), body)
    assert frame[4:] == expected
    assert decode_response(68, 0, expected)[1]["assignment"] == body["assignment"]
    no_assignment = encode_response(RequestHeader(68, 0, 11, "x"), {**body, "assignment": None})
    assert no_assignment[4:].endswith(i32(4, 5000) + b"\xff\x00")


def test_consumer_group_describe_v0_request_fixture() -> None:
    frame = (
        struct.pack(">hhi", 69, 0, 2) + b"\xff\xff" + b"\x00"
        + b"\x02" + cstr("g1") + b"\x01" + b"\x00"  # group ids, include authorized ops
    )  # fmt: skip
    header, body = decode_request(frame)
    assert header.client_id is None
    assert body == {"group_ids": ["g1"], "include_authorized_operations": True}


def test_write_txn_markers_v0_request_fixture() -> None:
    frame = (
        struct.pack(">hhi", 27, 0, 3) + b"\x00\x01c"
        + i32(1) + struct.pack(">qh?", 77, 2, True)  # one marker: producer, epoch, commit
        + i32(1) + b"\x00\x01t" + i32(2) + i32(0, 1)  # topics: "t", partitions [0, 1]
        + i32(5)  # coordinator epoch
    )  # fmt: skip
    _, body = decode_request(frame)
    marker = body["markers"][0]
    assert (marker["producer_id"], marker["producer_epoch"], marker["transaction_result"]) == (
        77,
        2,
        True,
    )
    assert marker["topics"] == [{"name": "t", "partition_indexes": [0, 1]}]
    assert marker["coordinator_epoch"] == 5
    assert encode_request(RequestHeader(27, 0, 3, "c"), body)[4:] == frame
