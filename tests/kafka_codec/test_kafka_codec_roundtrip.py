"""Round trips through the codec for every (api, version) in the schema table."""

from __future__ import annotations

import pytest

from protocols.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocols.kafka.schema import SCHEMAS
from tests.kafka_codec.kafka_codec_samples import (
    all_versions,
    expected_after_decode,
    plain,
    request_sample,
    response_sample,
)

VERSIONS = all_versions()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_request_round_trip(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = request_sample(schema, version, seed)
    header = RequestHeader(api_key, version, 1000 + seed, "client-ä" if seed else None)
    frame = encode_request(header, body)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    decoded_header, decoded = decode_request(frame[4:])
    assert decoded_header == header
    assert plain(decoded) == expected_after_decode(schema.request, version, body)
    # Re-encoding the decoded dict gives the same bytes.
    assert encode_request(decoded_header, decoded) == frame


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_response_round_trip(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = response_sample(schema, version, seed)
    header = RequestHeader(api_key, version, 77 + seed, "c")
    frame = encode_response(header, body)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 77 + seed
    assert plain(decoded) == expected_after_decode(schema.response, version, body)
    assert encode_response(header, decoded) == frame


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_empty_body_encodes_spec_defaults(api_key: int, version: int) -> None:
    """Every key missing: the encoder fills spec defaults and the decoder reads them back."""
    schema = SCHEMAS[api_key]
    frame = encode_request(RequestHeader(api_key, version, 1, "c"), {})
    _, decoded = decode_request(frame[4:])
    assert plain(decoded) == expected_after_decode(schema.request, version, {})
    frame = encode_response(RequestHeader(api_key, version, 1, "c"), {})
    _, decoded = decode_response(api_key, version, frame[4:])
    assert plain(decoded) == expected_after_decode(schema.response, version, {})
