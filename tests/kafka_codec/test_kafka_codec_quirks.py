"""Protocol quirks (each is data in the table) and the codec's handling of bad input."""

from __future__ import annotations

import struct

import pytest

from protocols.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    supported_api_versions,
)
from protocols.kafka.errors import ErrorCode, MalformedRequestError, UnsupportedVersionError
from protocols.kafka.schema import SCHEMAS


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data


# --- response header: ApiVersions always v0 -----------------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_response_uses_header_v0_even_when_flexible(version: int) -> None:
    assert SCHEMAS[18].response_header_v0_always
    frame = encode_response(RequestHeader(18, version, 7, "c"), {"error_code": 0, "api_keys": []})
    # size, correlation id, then straight into the body: error_code, then compact array (0 items)
    assert frame[4:8] == struct.pack(">i", 7)
    assert frame[8:10] == b"\x00\x00"
    assert frame[10] == 1


def test_other_flexible_responses_use_header_v1() -> None:
    frame = encode_response(RequestHeader(3, 9, 7, "c"), {})
    assert frame[4:8] == struct.pack(">i", 7)
    assert frame[8] == 0  # the response header's (empty) tagged fields
    frame = encode_response(RequestHeader(3, 8, 7, "c"), {})
    assert frame[8:12] == b"\x00\x00\x00\x00"  # v0 header: body's throttle_time_ms follows


# --- request header: ClientId never compact ---


def test_request_header_v2_client_id_is_not_compact() -> None:
    frame = encode_request(RequestHeader(3, 12, 9, "abc"), {"topics": None})
    assert frame[4:12] == struct.pack(">hhi", 3, 12, 9)
    assert frame[12:17] == b"\x00\x03abc"  # int16 length, as in header v1
    assert frame[17] == 0  # header v2 tagged fields
    header, _ = decode_request(frame[4:])
    assert header.client_id == "abc"


def test_request_header_null_client_id() -> None:
    frame = encode_request(RequestHeader(18, 0, 1, None), {})
    assert frame[12:14] == b"\xff\xff"
    assert decode_request(frame[4:])[0].client_id is None


# --- ApiVersions of an unknown version ---


def test_unknown_api_versions_version_is_answerable_with_v0() -> None:
    body = _compact_string("future-client") + _compact_string("9.9") + b"\x00"
    frame = struct.pack(">hhi", 18, 99, 31) + b"\x00\x03cli" + b"\x00" + body
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame)
    error = caught.value
    assert error.code == ErrorCode.UNSUPPORTED_VERSION
    assert error.header == RequestHeader(18, 99, 31, "cli")
    answer = encode_response(
        error.header,
        {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": supported_api_versions()},
    )
    correlation_id, decoded = decode_response(18, 0, answer[4:])
    assert correlation_id == 31
    assert decoded["error_code"] == 35
    assert {e["api_key"] for e in decoded["api_keys"]} == set(SCHEMAS)


def test_unknown_version_of_other_api_is_unsupported_but_not_answerable() -> None:
    frame = struct.pack(">hhi", 0, 12, 5) + b"\x00\x01x"
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame)
    assert caught.value.header == RequestHeader(0, 12, 5, "x")
    with pytest.raises(UnsupportedVersionError):
        encode_response(caught.value.header, {})


def test_unknown_api_key_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(struct.pack(">hhi", 999, 0, 5))
    assert caught.value.header == RequestHeader(999, 0, 5, None)


def test_supported_versions_leave_out_unstable_latest() -> None:
    entries = {e["api_key"]: e for e in supported_api_versions()}
    assert entries[26]["max_version"] == SCHEMAS[26].max_version - 1  # EndTxn 5 is unstable
    assert entries[0]["max_version"] == SCHEMAS[0].max_version
    everything = {e["api_key"]: e for e in supported_api_versions(include_unstable=True)}
    assert everything[26]["max_version"] == SCHEMAS[26].max_version


# --- tagged fields ---


def test_tagged_fields_written_only_when_not_default() -> None:
    header = RequestHeader(18, 3, 1, None)
    plain = encode_response(header, {"api_keys": []})
    same = encode_response(header, {"api_keys": [], "finalized_features_epoch": -1})
    assert plain == same
    assert plain.endswith(b"\x00")  # no tagged fields
    tagged = encode_response(header, {"api_keys": [], "finalized_features_epoch": 5})
    assert tagged[len(plain) - 1 :] == b"\x01\x01\x08" + struct.pack(">q", 5)
    _, decoded = decode_response(18, 3, tagged[4:])
    assert decoded["finalized_features_epoch"] == 5
    _, decoded = decode_response(18, 3, plain[4:])
    assert decoded["finalized_features_epoch"] == -1  # default when not sent


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = bytearray(encode_request(RequestHeader(18, 3, 1, "c"), {})[4:])
    assert frame[-1] == 0
    # Two tags the spec does not know (5 with 3 bytes, 99 empty) in the body's tag section.
    frame[-1:] = b"\x02" + b"\x05\x03abc" + b"\x63\x00"
    _, body = decode_request(bytes(frame))
    assert body["client_software_name"] == ""


def test_tagged_field_longer_than_frame_is_malformed() -> None:
    frame = bytearray(encode_request(RequestHeader(18, 3, 1, "c"), {})[4:])
    frame[-1:] = b"\x01\x05\x7f"
    with pytest.raises(MalformedRequestError):
        decode_request(bytes(frame))


# --- nullable / compact / records ---


def test_nullable_array_by_version() -> None:
    frame = encode_request(RequestHeader(3, 1, 1, "c"), {"topics": None})
    assert frame[-4:] == b"\xff\xff\xff\xff"
    assert decode_request(frame[4:])[1]["topics"] is None
    bad = struct.pack(">hhi", 3, 0, 1) + b"\x00\x01c" + b"\xff\xff\xff\xff"
    with pytest.raises(MalformedRequestError):
        decode_request(bad)  # Metadata v0 topics are not nullable


def test_non_nullable_encode_refuses_none() -> None:
    with pytest.raises(ValueError):
        encode_request(RequestHeader(3, 0, 1, "c"), {"topics": None})


def test_compact_encoding_in_flexible_versions() -> None:
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"R"}]}]}
    frame = encode_request(RequestHeader(0, 9, 1, "c"), body)
    tail = frame[4 + 8 + 3 + 1 :]
    # transactional_id null (0), acks, timeout, 1 topic (2), "t" (2 + 't'), 1 partition (2),
    # index, records length 1 (2), b"R", partition tags, topic tags, body tags
    assert tail == (
        b"\x00" + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x02" + b"\x02t" + b"\x02"
        + b"\x00\x00\x00\x00" + b"\x02R" + b"\x00\x00\x00"
    )  # fmt: skip


def test_records_are_zero_copy_views() -> None:
    payload = bytes(range(200))
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": payload}]}]}
    frame = encode_request(RequestHeader(0, 7, 1, "c"), body)[4:]
    _, decoded = decode_request(frame)
    records = decoded["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert records.obj is frame
    assert records == payload


def test_records_accept_a_sequence_of_buffers() -> None:
    parts = [b"abc", memoryview(b"defg"), bytearray(b"h")]
    body = {"responses": [{"name": "t", "partitions": [{"partition_index": 0, "records": parts}]}]}
    frame = encode_response(RequestHeader(1, 11, 1, "c"), body)
    _, decoded = decode_response(1, 11, frame[4:])
    assert decoded["responses"][0]["partitions"][0]["records"] == b"abcdefgh"


def test_missing_keys_take_spec_defaults() -> None:
    frame = encode_response(RequestHeader(0, 8, 1, "c"), {"responses": [{"name": "t"}]})
    _, decoded = decode_response(0, 8, frame[4:])
    assert decoded["responses"][0]["partition_responses"] == []
    frame = encode_response(
        RequestHeader(0, 8, 1, "c"),
        {"responses": [{"name": "t", "partition_responses": [{"index": 1}]}]},
    )
    _, decoded = decode_response(0, 8, frame[4:])
    partition = decoded["responses"][0]["partition_responses"][0]
    assert partition["log_append_time_ms"] == -1  # spec default "-1"
    assert partition["log_start_offset"] == -1
    assert partition["error_message"] is None


# --- malformed input ---


def _produce_frame() -> bytes:
    body = {
        "transactional_id": "tx",
        "acks": -1,
        "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * 20}]}],
    }
    return encode_request(RequestHeader(0, 7, 1, "c"), body)[4:]


def test_every_truncation_is_malformed() -> None:
    frame = _produce_frame()
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequestError):
            decode_request(frame[:cut])


def test_huge_array_count_is_refused_before_allocating() -> None:
    frame = struct.pack(">hhi", 0, 3, 1) + b"\x00\x01c" + b"\xff\xff" + b"\x00\x01" + b"\x00" * 4
    frame += struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(MalformedRequestError, match="exceeds"):
        decode_request(frame)


def test_huge_string_length_is_refused() -> None:
    frame = struct.pack(">hhi", 3, 1, 1) + b"\x00\x01c" + struct.pack(">i", 1) + b"\x7f\xff"
    with pytest.raises(MalformedRequestError, match="exceeds"):
        decode_request(frame)


def test_invalid_utf8_is_malformed() -> None:
    frame = struct.pack(">hhi", 3, 1, 1) + b"\x00\x01c" + struct.pack(">i", 1) + b"\x00\x02\xff\xfe"
    with pytest.raises(MalformedRequestError, match="UTF-8"):
        decode_request(frame)


def test_overlong_varint_is_malformed() -> None:
    frame = struct.pack(">hhi", 18, 3, 1) + b"\x00\x01c" + b"\x00" + b"\xff" * 6
    with pytest.raises(MalformedRequestError, match="varint"):
        decode_request(frame)


def test_short_header_is_malformed() -> None:
    with pytest.raises(MalformedRequestError):
        decode_request(b"\x00\x12\x00")


def test_trailing_bytes_are_tolerated() -> None:
    header, _ = decode_request(_produce_frame() + b"junk")
    assert header.api_key == 0


def test_decoded_defaults_are_never_shared() -> None:
    frame = encode_request(RequestHeader(1, 0, 1, "c"), {"topics": []})[4:]
    _, first = decode_request(frame)
    _, second = decode_request(frame)
    assert first["forgotten_topics_data"] == []  # a v7+ field: default for v0
    first["forgotten_topics_data"].append({"topic": "x"})
    assert second["forgotten_topics_data"] == []


def test_unknown_request_header_tags_are_skipped() -> None:
    frame = encode_request(RequestHeader(18, 3, 4, "cli"), {"client_software_name": "x"})[4:]
    header_end = 8 + 2 + 3
    assert frame[header_end] == 0
    tagged = frame[:header_end] + b"\x01\x00\x02hi" + frame[header_end + 1 :]
    header, body = decode_request(tagged)
    assert header == RequestHeader(18, 3, 4, "cli")
    assert body["client_software_name"] == "x"
