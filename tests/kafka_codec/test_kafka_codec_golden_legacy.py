"""Golden bytes for old versions against kafka-python's hand-written legacy protocol classes.

kafka-python 3's spec-driven classes start at Kafka 4.0's minimum versions (e.g. Produce v3),
but real clients still send older ones (kafka-python 2 ListOffsets v0/v1, OffsetFetch v0/v1,
Produce v0-v2 ...).  `kafka.protocol.old` keeps hand-written (positional) layouts of those;
they are an encoder independent of any JSON spec.  For each non-flexible (api, version) it
has and our table has, request bodies must encode to the same bytes, and our response bodies
must decode with its classes to the same values.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest

from protocols.kafka.codec import RequestHeader, encode_request, encode_response
from protocols.kafka.schema import SCHEMAS, Field
from tests.kafka_codec.kafka_codec_samples import request_sample, response_sample

old = pytest.importorskip("kafka.protocol.old")
from kafka.protocol.old.api import Request, Response  # noqa: E402
from kafka.protocol.old.types import Array, Schema  # noqa: E402


def _legacy_classes() -> dict[tuple[str, int, int], Any]:
    for module in pkgutil.iter_modules(old.__path__, "kafka.protocol.old."):
        importlib.import_module(module.name)
    found = {}
    for base, kind in ((Request, "request"), (Response, "response")):
        pending = list(base.__subclasses__())
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            key = getattr(cls, "API_KEY", None)
            version = getattr(cls, "API_VERSION", None)
            if not isinstance(key, int) or not isinstance(version, int):
                continue
            if cls.FLEXIBLE_VERSION or key not in SCHEMAS:
                continue
            if SCHEMAS[key].supports(version) and not SCHEMAS[key].is_flexible(version):
                found[(kind, key, version)] = cls
    return found


# kafka-python's legacy DescribeLogDirsRequest_v0 declares `partitions` as one int32 where the
# Kafka spec (and its own v1+ JSON classes) have []int32: a bug there, not a layout to match.
KNOWN_BAD_LEGACY = {("request", 35, 0)}

LEGACY = {k: v for k, v in _legacy_classes().items() if k not in KNOWN_BAD_LEGACY}
REQUESTS = sorted((k, v) for kind, k, v in LEGACY if kind == "request")
RESPONSES = sorted((k, v) for kind, k, v in LEGACY if kind == "response")


def test_legacy_coverage_includes_versions_clients_still_use() -> None:
    for pair in [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1), (9, 0), (9, 1), (8, 0), (3, 0)]:
        assert pair in REQUESTS, pair


def _positional(fields: tuple[Field, ...], version: int, body: dict[str, Any]) -> list[Any]:
    values = []
    for field in fields:
        if not field.present_in(version):
            continue
        value = body[field.key]
        if field.is_struct and value is not None:
            if field.is_array:
                value = [_positional(field.fields, version, item) for item in value]
            else:
                value = _positional(field.fields, version, value)
        values.append(value)
    return values


def _adapt(their_type: Any, value: Any) -> Any:
    """The spec wraps some primitive arrays in one-field structs ([]MetadataRequestTopic with
    only Name in v0); the legacy classes declare the bare primitive array.  Same wire bytes."""
    if isinstance(their_type, Schema):
        values = iter(value)
        out = [_take(t, values) for t in their_type.fields]
        assert next(values, None) is None, "legacy schema has fewer fields"
        return out
    if isinstance(their_type, Array) and value is not None:
        inner = their_type.array_of
        if isinstance(inner, Schema):
            return [_adapt(inner, v) for v in value]
        unwrapped = [v[0] if isinstance(v, list) and len(v) == 1 else v for v in value]
        return [_adapt(inner, v) for v in unwrapped]
    return value


def _take(their_type: Any, values: Any) -> Any:
    # A Schema nested directly (not in an Array) is inline on the wire: it takes our next
    # values (CreatePartitions v0/v1 legacy groups count + assignment that way).
    if isinstance(their_type, Schema):
        return [_take(t, values) for t in their_type.fields]
    return _adapt(their_type, next(values))


def _plain_legacy(value: Any) -> Any:
    if hasattr(value, "SCHEMA"):
        return [_plain_legacy(getattr(value, name)) for name in value.SCHEMA.names]
    if isinstance(value, list | tuple):
        return [_plain_legacy(v) for v in value]
    if isinstance(value, set):  # authorized-operations bit fields
        return sum(1 << bit for bit in value)
    return value


@pytest.mark.parametrize(("api_key", "version"), REQUESTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_request_bytes_match_legacy_classes(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = request_sample(schema, version, seed, strict=bool(seed))
    cls = LEGACY[("request", api_key, version)]
    values = _adapt(cls.SCHEMA, _positional(schema.request, version, body))
    theirs = bytes(cls(*values).encode())
    ours = encode_request(RequestHeader(api_key, version, 1, "c"), body)
    assert ours[4 + 8 + 3 :] == theirs


@pytest.mark.parametrize(("api_key", "version"), RESPONSES)
@pytest.mark.parametrize("seed", [0, 1])
def test_response_decodes_with_legacy_classes(api_key: int, version: int, seed: int) -> None:
    schema = SCHEMAS[api_key]
    body = response_sample(schema, version, seed, strict=bool(seed))
    if api_key == 18:
        body["error_code"] = 0  # kafka-python re-reads ApiVersions error answers as v0
    for key in ("cluster_authorized_operations", "authorized_operations"):
        if key in body:  # legacy bit fields hold non-negative masks only
            body[key] = 0b1011_0100
    for topic_or_group in body.get("topics", []) + body.get("groups", []):
        for key in ("topic_authorized_operations", "authorized_operations"):
            if key in topic_or_group:
                topic_or_group[key] = 0b0110_1000
    ours = encode_response(RequestHeader(api_key, version, 1, "c"), body)[8:]
    cls = LEGACY[("response", api_key, version)]
    decoded = cls.decode(ours)
    expected = _adapt(cls.SCHEMA, _positional(schema.response, version, body))
    assert _plain_legacy(decoded) == expected
