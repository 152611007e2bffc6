"""Whole-request error bodies of the admin/ACL/SASL APIs encode and carry the code everywhere."""

from __future__ import annotations

import pytest

from protocols.kafka.codec import RequestHeader, decode_response, encode_response
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers import HANDLERS
from protocols.kafka.handlers.admin_errors import ADMIN_ERROR_BUILDERS
from protocols.kafka.handlers.error_responses import whole_request_error

SAMPLE_BODIES: dict[int, dict] = {
    17: {}, 29: {}, 36: {}, 60: {},
    21: {"topics": [{"name": "t", "partitions": [{"partition_index": 3, "offset": 1}]}]},
    30: {"creations": [{}, {}]},
    31: {"filters": [{}]},
    33: {"resources": [{"resource_type": 2, "resource_name": "t"}]},
    44: {"resources": [{"resource_type": 2, "resource_name": "t"}]},
    61: {"topics": [{"name": "t", "partition_indexes": [3, 4]}]},
}


def _codes(value: object) -> list[int]:
    if isinstance(value, dict):
        return [c for k, v in value.items()
                for c in ([v] if k == "error_code" else _codes(v))]
    if isinstance(value, list):
        return [c for item in value for c in _codes(item)]
    return []


CASES = [(key, v) for key in SAMPLE_BODIES
         for v in range(HANDLERS[key].min_version, HANDLERS[key].max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_error_body_encodes_with_the_code(api_key: int, version: int) -> None:
    builder = ADMIN_ERROR_BUILDERS.get(api_key)
    body: dict | None
    if builder is not None:
        body = builder(version, SAMPLE_BODIES[api_key], ErrorCode.NOT_CONTROLLER, "nope")
    else:
        body = whole_request_error(api_key, version, {}, ErrorCode.NOT_CONTROLLER, "nope")
    assert body is not None
    frame = encode_response(RequestHeader(api_key, version, 5, "c"), body)
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 5
    codes = _codes(decoded)
    assert codes and set(codes) == {ErrorCode.NOT_CONTROLLER}, decoded
