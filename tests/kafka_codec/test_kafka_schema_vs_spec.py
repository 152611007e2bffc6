"""The schema table states exactly what Apache Kafka's JSON message specs say.

For every API in the table and both directions: API key, valid and flexible versions,
deprecated versions, the unstable-latest flag, and recursively every field's name, type,
versions, nullable versions, tag and tagged versions, default, ignorable flag and flexible
override (commonStructs resolved).  The spec directory is ../shared/reference relative to the
repository root (CI checks shared/ out beside the clone).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from protocols.kafka.schema import SCHEMAS, Field
from protocols.kafka.schema.headers import (
    REQUEST_HEADER,
    REQUEST_HEADER_FLEXIBLE_VERSIONS,
    REQUEST_HEADER_VALID_VERSIONS,
    RESPONSE_HEADER,
    RESPONSE_HEADER_FLEXIBLE_VERSIONS,
    RESPONSE_HEADER_VALID_VERSIONS,
)
from protocols.kafka.schema.model import MISSING
from tests.kafka_codec.kafka_codec_samples import SPEC_DIR

REQUIRED_API_KEYS = {
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 35, 36, 37, 42, 43, 44, 47, 48, 49, 50, 51, 60, 61, 65, 66, 68,
    69,
    38, 39, 40, 41,
    76, 77, 78, 79, 90, 91, 92,
}  # fmt: skip
# KIP-932 share groups: their current specs live apart (kafka-message-specs has the removed v0).
SHARE_API_KEYS = {76, 77, 78, 79, 90, 91, 92}
SHARE_SPEC_DIR = SPEC_DIR.parent / "kafka-share-specs"
# Fields the table has beyond the stored specs, because real clients send them (the generator's
# EXTRA_FIELDS): kafka-clients 4.3.0's ShareFetch v2 carries IsRenewAck after ShareAcquireMode,
# and its AlterShareGroupOffsets response a top-level ErrorCode and ErrorMessage.
EXTRA_FIELDS = {
    ("ShareFetch", "Request"): ("ShareAcquireMode", ("IsRenewAck",)),
    ("AlterShareGroupOffsets", "Response"): ("ThrottleTimeMs", ("ErrorCode", "ErrorMessage")),
}

pytestmark = pytest.mark.skipif(not SPEC_DIR.is_dir(), reason=f"no spec dir at {SPEC_DIR}")


def _load(path: Path) -> dict[str, Any]:
    # The spec files carry // line comments; none of them sits inside a string value.
    text = re.sub(r'^\s*//.*$|\s//[^"\n]*$', "", path.read_text(), flags=re.M)
    return json.loads(text)


def _spec_default(field_type: str, raw: Any) -> Any:
    if raw == "null":
        return None
    if isinstance(raw, bool | int):
        return raw
    if field_type == "bool":
        return {"true": True, "false": False}[raw]
    if field_type in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(raw, 0)
    return raw


def _compare_fields(
    ours: tuple[Field, ...], spec: list[dict[str, Any]], structs: dict[str, Any], where: str
) -> None:
    assert [f.name for f in ours] == [s["name"] for s in spec], where
    for field, s in zip(ours, spec, strict=True):
        at = f"{where}.{s['name']}"
        assert field.type == s["type"], at
        assert field.versions == s["versions"], at
        assert field.nullable == s.get("nullableVersions", "none"), at
        assert field.tag == s.get("tag"), at
        assert field.tagged == s.get("taggedVersions", "none"), at
        expected_default = _spec_default(s["type"], s["default"]) if "default" in s else MISSING
        assert field.default == expected_default, at
        assert field.ignorable == bool(s.get("ignorable", False)), at
        assert field.flexible == s.get("flexibleVersions"), at
        element = s["type"].removeprefix("[]")
        children = s.get("fields")
        if children is None and element in structs:
            children = structs[element]["fields"]
        _compare_fields(field.fields, children or [], structs, at)


def test_table_has_every_required_api() -> None:
    assert set(SCHEMAS) == REQUIRED_API_KEYS


@pytest.mark.parametrize("api_key", sorted(REQUIRED_API_KEYS))
def test_api_matches_spec(api_key: int) -> None:
    schema = SCHEMAS[api_key]
    spec_dir = SHARE_SPEC_DIR if api_key in SHARE_API_KEYS else SPEC_DIR
    for direction, fields in (("Request", schema.request), ("Response", schema.response)):
        spec = _load(spec_dir / f"{schema.name}{direction}.json")
        assert spec["apiKey"] == api_key
        assert spec["type"] == direction.lower()
        if direction == "Response" and api_key == 90:
            # the stored DescribeShareGroupOffsets response (0-1) is newer than its request (0)
            assert (spec["validVersions"], schema.valid_versions) == ("0-1", "0")
        else:
            assert spec["validVersions"] == schema.valid_versions
        assert spec["flexibleVersions"] == schema.flexible_versions
        if direction == "Request":  # request-only attributes (responses do not repeat them)
            assert spec.get("deprecatedVersions", "none") == schema.deprecated_versions
            assert bool(spec.get("latestVersionUnstable")) == schema.latest_version_unstable
        structs = {s["name"]: s for s in spec.get("commonStructs", [])}
        if (schema.name, direction) in EXTRA_FIELDS:
            after, extras = EXTRA_FIELDS[(schema.name, direction)]
            names = [f.name for f in fields]
            at = names.index(after) + 1
            assert tuple(names[at:at + len(extras)]) == extras
            fields = tuple(f for f in fields if f.name not in extras)
        _compare_fields(fields, spec["fields"], structs, f"{schema.name}{direction}")


def test_headers_match_spec() -> None:
    request = _load(SPEC_DIR / "RequestHeader.json")
    response = _load(SPEC_DIR / "ResponseHeader.json")
    assert request["validVersions"] == REQUEST_HEADER_VALID_VERSIONS
    assert request["flexibleVersions"] == REQUEST_HEADER_FLEXIBLE_VERSIONS
    assert response["validVersions"] == RESPONSE_HEADER_VALID_VERSIONS
    assert response["flexibleVersions"] == RESPONSE_HEADER_FLEXIBLE_VERSIONS
    _compare_fields(REQUEST_HEADER, request["fields"], {}, "RequestHeader")
    _compare_fields(RESPONSE_HEADER, response["fields"], {}, "ResponseHeader")


def test_spec_dir_has_no_unexpected_api_in_our_key_range() -> None:
    """Guards the name mapping: each required key's spec file really has that key."""
    keys = {}
    for path in [*SPEC_DIR.glob("*Request.json"), *SHARE_SPEC_DIR.glob("*Request.json")]:
        spec = _load(path)
        if spec["apiKey"] in SHARE_API_KEYS and path.parent == SPEC_DIR:
            continue  # the removed v0 copies
        keys[spec["apiKey"]] = spec["name"].removesuffix("Request")
    for api_key in REQUIRED_API_KEYS:
        assert keys[api_key] == SCHEMAS[api_key].name
