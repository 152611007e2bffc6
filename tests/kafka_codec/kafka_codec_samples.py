"""Test helpers: deterministic sample bodies for any (fields, version) of the schema table.

Values are chosen to differ from the field defaults (so tagged fields are always written, as a
third-party encoder given the value would write them) while exercising nulls, empty arrays and
non-ASCII strings where the version allows.  Also: locating the spec directory, and turning
decoded dicts (memoryviews) into plain comparable values.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

from protocols.kafka.schema import SCHEMAS, ApiSchema, Field
from protocols.kafka.schema_compiler import type_default

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = REPO_ROOT.parent / "shared" / "reference" / "kafka-message-specs"

_INT_RANGES = {
    "int8": (-128, 127),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 65535),
    "uint32": (0, 2**32 - 1),
}


def all_versions() -> list[tuple[int, int]]:
    return [
        (schema.api_key, version)
        for schema in SCHEMAS.values()
        for version in range(schema.min_version, schema.max_version + 1)
    ]


def _scalar(field: Field, type_name: str, nullable: bool, rng: random.Random, strict: bool) -> Any:
    default = type_default(field)
    if type_name in _INT_RANGES:
        low, high = _INT_RANGES[type_name]
        while True:
            value = rng.choice([rng.randint(low, high), rng.randint(-1, 300) if low < 0 else 7])
            if low <= value <= high and value != default:
                return value
    if type_name == "bool":
        return not default if default is not None else True
    if type_name == "float64":
        return rng.random() * 1000 + 1
    if type_name == "uuid":
        return uuid.UUID(int=rng.getrandbits(128) | 1)
    if nullable and not strict and rng.random() < 0.2:
        return None
    if type_name == "string":
        return rng.choice(["topic", "grüße-✓", "x" * rng.randint(1, 40), "a.b_c-d"]) + str(
            rng.randint(0, 999)
        )
    if type_name in ("bytes", "records"):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    raise AssertionError(type_name)


def sample_value(field: Field, version: int, rng: random.Random, strict: bool) -> Any:
    nullable = field.nullable_in(version)
    if field.is_array:
        if nullable and not strict and rng.random() < 0.15:
            return None
        count = rng.randint(1, 2) if strict else rng.randint(0, 2)
        if field.is_struct:
            return [sample_body(field.fields, version, rng, strict) for _ in range(count)]
        return [_scalar(field, field.element_type, False, rng, True) for _ in range(count)]
    if field.is_struct:
        if nullable and not strict and rng.random() < 0.2:
            return None
        return sample_body(field.fields, version, rng, strict)
    return _scalar(field, field.type, nullable, rng, strict)


def sample_body(
    fields: tuple[Field, ...], version: int, rng: random.Random, strict: bool = False
) -> dict[str, Any]:
    """Values for the fields present in `version`.  `strict`: tagged-safe (never null/empty)."""
    body = {}
    for field in fields:
        if field.present_in(version):
            tagged = field.tagged_in(version)
            body[field.key] = sample_value(field, version, rng, strict or tagged)
    return body


def expected_after_decode(
    fields: tuple[Field, ...], version: int, body: dict[str, Any]
) -> dict[str, Any]:
    """What decoding the encoding of `body` must give: body values plus defaults elsewhere."""
    out: dict[str, Any] = {}
    for field in fields:
        if field.present_in(version) and field.key in body:
            value = body[field.key]
            if field.is_struct and value is not None:
                if field.is_array:
                    value = [expected_after_decode(field.fields, version, v) for v in value]
                else:
                    value = expected_after_decode(field.fields, version, value)
            out[field.key] = value
        else:
            out[field.key] = _plain_default(field)
    return out


def _plain_default(field: Field) -> Any:
    return type_default(field)


def plain(value: Any) -> Any:
    """memoryviews -> bytes, recursively, for comparisons."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def request_sample(schema: ApiSchema, version: int, seed: int = 0, strict: bool = False) -> dict:
    rng = random.Random(f"{schema.api_key}/{version}/req/{seed}")
    return sample_body(schema.request, version, rng, strict)


def response_sample(schema: ApiSchema, version: int, seed: int = 0, strict: bool = False) -> dict:
    rng = random.Random(f"{schema.api_key}/{version}/resp/{seed}")
    return sample_body(schema.response, version, rng, strict)
