"""Whole-request error responses encode for every advertised (api, version) and carry the code."""

from __future__ import annotations

import uuid

import pytest

from gateway.kafka.broker import KafkaBroker
from protocols.kafka.codec import RequestHeader, decode_response, encode_response
from protocols.kafka.errors import ErrorCode, UnknownTopicOrPartitionError
from protocols.kafka.handlers.error_responses import error_code_of, whole_request_error

T = uuid.uuid4()
SAMPLE_BODIES: dict[int, dict] = {
    17: {}, 29: {}, 36: {}, 60: {},
    21: {"topics": [{"name": "t", "partitions": [{"partition_index": 3, "offset": 1}]}]},
    30: {"creations": [{}]}, 31: {"filters": [{}]},
    33: {"resources": [{"resource_type": 2, "resource_name": "t"}]},
    44: {"resources": [{"resource_type": 2, "resource_name": "t"}]},
    61: {"topics": [{"name": "t", "partition_indexes": [3]}]},
    0: {"topic_data": [{"name": "t", "partition_data": [{"index": 3}]}]},
    1: {"topics": [{"topic": "t", "topic_id": T, "partitions": [{"partition": 3}]}]},
    2: {"topics": [{"name": "t", "partitions": [{"partition_index": 3}]}]},
    3: {"topics": [{"name": "t", "topic_id": T}]},
    10: {"key": "g", "coordinator_keys": ["g"]},
    18: {},
    19: {"topics": [{"name": "t"}]},
    20: {"topic_names": ["t"], "topics": [{"name": "t", "topic_id": T}]},
    22: {},
    23: {"topics": [{"topic": "t", "partitions": [{"partition": 3}]}]},
    32: {"resources": [{"resource_type": 2, "resource_name": "t"}]},
    37: {"topics": [{"name": "t"}]},
    35: {"topics": None},
    43: {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [3]}]},
    48: {"components": [{"entity_type": "user", "match_type": 0, "match": "u"}]},
    49: {"entries": [{"entity": [{"entity_type": "user", "entity_name": "u"}], "ops": []}]},
    50: {"users": [{"name": "u"}]},
    51: {"deletions": [{"name": "u", "mechanism": 1}], "upsertions": []},
    65: {"transactional_ids": ["x"]},
    66: {},
    38: {"renewers": []}, 39: {"hmac": b"h"}, 40: {"hmac": b"h"}, 41: {"owners": None},
}


def _codes(value: object) -> list[int]:
    """Every error_code in a decoded response, depth first."""
    found: list[int] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "error_code":
                found.append(item)
            else:
                found.extend(_codes(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_codes(item))
    return found


def _advertised() -> list[tuple[int, int]]:
    broker = KafkaBroker(topic_service=None)  # type: ignore[arg-type]
    return [(key, version) for key, (low, high) in broker.supported_api_versions().items()
            for version in range(low, high + 1)]


@pytest.mark.parametrize(("api_key", "version"), _advertised())
def test_error_response_encodes_with_the_code(api_key: int, version: int) -> None:
    body = whole_request_error(api_key, version, SAMPLE_BODIES[api_key],
                               ErrorCode.NOT_CONTROLLER, "nope")
    assert body is not None
    frame = encode_response(RequestHeader(api_key, version, 99, "c"), body)
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 99
    if ((api_key, version < 7) == (1, True) or (api_key, version >= 4) == (10, True)
            or (api_key, version) in ((43, 0), (35, 0), (35, 1), (35, 2))):
        decoded.pop("error_code")  # not in this version's layout: the decoder shows a default
    codes = _codes(decoded)
    if api_key == 1 and version < 7 or api_key != 1:
        assert codes and set(codes) == {ErrorCode.NOT_CONTROLLER}, decoded
    else:  # Fetch v7+: the top-level error answers the whole request
        assert decoded["error_code"] == ErrorCode.NOT_CONTROLLER


def test_error_code_of() -> None:
    assert error_code_of(UnknownTopicOrPartitionError("x")) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_code_of(RuntimeError("bug")) == ErrorCode.UNKNOWN_SERVER_ERROR


def test_generic_builder_for_apis_with_one_error_field() -> None:
    body = whole_request_error(12, 4, {}, ErrorCode.UNSUPPORTED_VERSION)  # Heartbeat
    assert body is not None
    frame = encode_response(RequestHeader(12, 4, 1, None), body)
    assert decode_response(12, 4, frame[4:])[1]["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert whole_request_error(999, 0, {}, ErrorCode.UNSUPPORTED_VERSION) is None
