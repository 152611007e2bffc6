"""Golden bytes against a third-party encoder: kafka-python 3's protocol classes.

For every (api, version) that both kafka-python and our table support:
* kafka-python encodes a request (with its header) -> the bytes must equal ours, and our
  decoder must read back the values given;
* we encode a response -> kafka-python's response class must decode it to the values given.
kafka-python builds its classes from its own copy of the Kafka specs (Kafka 4.x), so only the
versions inside its own valid range are compared.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest

from protocols.kafka.codec import RequestHeader, decode_request, encode_request, encode_response
from protocols.kafka.schema import SCHEMAS
from tests.kafka_codec.kafka_codec_samples import (
    expected_after_decode,
    plain,
    request_sample,
    response_sample,
)

kafka_protocol = pytest.importorskip("kafka.protocol")
from kafka.protocol.api_message import ApiMessage  # noqa: E402


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    for module in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in module.name or "generate" in module.name:
            continue
        importlib.import_module(module.name)
    found: dict[tuple[int, str], Any] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__dict__.get("_json") is not None and cls._class_version is None:
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kafka_python_classes()


def _common_versions(kind: str) -> list[tuple[int, int]]:
    pairs = []
    for api_key, schema in SCHEMAS.items():
        cls = KP.get((api_key, kind))
        if cls is None:
            continue
        low, high = cls.valid_versions
        for version in range(max(low, schema.min_version), min(high, schema.max_version) + 1):
            pairs.append((api_key, version))
    return pairs


REQUEST_VERSIONS = _common_versions("request")
RESPONSE_VERSIONS = _common_versions("response")


def test_golden_coverage_is_broad() -> None:
    covered = {api for api, _ in REQUEST_VERSIONS}
    # kafka-python 3 has every API of our table except ConsumerGroupHeartbeat/Describe (68, 69),
    # the delegation token APIs (38-41) and the KIP-932 share-group APIs (76-79, 90-92; the
    # bytes of those two families are checked against the Java client instead).
    assert set(SCHEMAS) - covered <= {38, 39, 40, 41, 68, 69, 76, 77, 78, 79, 90, 91, 92}
    assert len(REQUEST_VERSIONS) > 150


def _to_kafka_python(struct: Any, values: dict[str, Any]) -> dict[str, Any]:
    kwargs = {}
    fields = struct.fields
    for key, value in values.items():
        field = fields[key]  # KeyError here means the two tables disagree on a field name
        if value is not None and field.is_struct_array():
            value = [field.data_class(**_to_kafka_python(field, item)) for item in value]
        elif value is not None and field.is_struct():
            value = field.data_class(**_to_kafka_python(field, value))
        kwargs[key] = value
    return kwargs


def _from_kafka_python(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _from_kafka_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_kafka_python(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, set):  # kafka-python shows authorized-operations bit fields as sets
        return sum(1 << bit for bit in value)
    return value


@pytest.mark.parametrize(("api_key", "version"), REQUEST_VERSIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_request_bytes_match_kafka_python(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = request_sample(schema, version, seed, strict=bool(seed))
    cls = KP[(api_key, "request")]
    message = cls(version=version, **_to_kafka_python(cls._struct, body))
    message.with_header(correlation_id=4242 + seed, client_id="kp-client")
    theirs = bytes(message.encode(header=True))

    header = RequestHeader(api_key, version, 4242 + seed, "kp-client")
    assert encode_request(header, body)[4:] == theirs

    decoded_header, decoded = decode_request(theirs)
    assert decoded_header == header
    assert plain(decoded) == expected_after_decode(schema.request, version, body)


@pytest.mark.parametrize(("api_key", "version"), RESPONSE_VERSIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_response_decodes_with_kafka_python(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = response_sample(schema, version, seed, strict=bool(seed))
    _tame_bit_fields(body)
    if api_key == 18:
        # kafka-python (like the Java client) re-reads an ApiVersions error answer as v0.
        body["error_code"] = 0
    frame = encode_response(RequestHeader(api_key, version, 99 + seed, "x"), body)
    cls = KP[(api_key, "response")]
    theirs = cls.decode(frame[4:], version=version, header=True)
    assert theirs.header.correlation_id == 99 + seed
    got = _from_kafka_python(theirs.to_dict(json=False))
    expected = _rename_bit_fields(expected_after_decode(schema.response, version, body))
    assert got == _only_keys_of(expected, got)


# kafka-python patches the "authorized operations" int32 fields into a bit-field type named
# `authorized_operations` that holds only non-negative masks; adapt the samples to that.
_BIT_FIELDS = {"cluster_authorized_operations", "topic_authorized_operations"}


def _tame_bit_fields(value: Any) -> None:
    if isinstance(value, dict):
        for key in value:
            if key in _BIT_FIELDS or key == "authorized_operations":
                value[key] = 0b1011_0100
            else:
                _tame_bit_fields(value[key])
    elif isinstance(value, list):
        for item in value:
            _tame_bit_fields(item)


def _rename_bit_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            ("authorized_operations" if k in _BIT_FIELDS else k): _rename_bit_fields(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_rename_bit_fields(v) for v in value]
    return value


def _only_keys_of(expected: Any, got: Any) -> Any:
    """kafka-python's to_dict lists the fields of the version; ours also has absent ones."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return {k: _only_keys_of(expected[k], got[k]) for k in got if k in expected}
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [_only_keys_of(e, g) for e, g in zip(expected, got, strict=True)]
    return expected
