"""The vocabulary of the declarative Kafka schema table: `Field`, `ApiSchema`, version ranges.

A table entry states facts from Apache Kafka's message specs (field order, type, the versions a
field exists in, nullable versions, tagged fields and their tags, defaults, flexible versions)
plus the protocol quirks as data.  The codec compiles these entries into decoders/encoders; this
module only describes and never encodes or decodes anything itself.

Type strings are the spec's own: "int8", "int16", "int32", "int64", "uint16", "uint32",
"float64", "bool", "uuid", "string", "bytes", "records", "[]<type>" for arrays, and any other
name for a struct (whose fields are inlined in `Field.fields`, commonStructs included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

MAX_VERSION: Final = 0x7FFF


class _Missing:
    """Marker for 'the spec gives no default' (then the type's default applies)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

PRIMITIVE_TYPES: Final = frozenset(
    {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid"}
)
VARIABLE_TYPES: Final = frozenset({"string", "bytes", "records"})


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; empty when low > high ("none")."""

    low: int
    high: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


_RANGE = re.compile(r"^(\d+)(?:(\+)|-(\d+))?$")


def parse_versions(spec: str | None) -> VersionRange:
    """Parse the spec's version syntax: "3+", "0-6", "1", "none" (or None)."""
    if spec is None or spec == "none":
        return VersionRange(1, 0)
    match = _RANGE.match(spec.strip())
    if match is None:
        raise ValueError(f"bad version range {spec!r}")
    low = int(match.group(1))
    if match.group(2):
        return VersionRange(low, MAX_VERSION)
    high = int(match.group(3)) if match.group(3) is not None else low
    return VersionRange(low, high)


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """The dict key for a spec field name: "TopicData" -> "topic_data"."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


@dataclass(frozen=True)
class Field:
    """One field of a request, response, header or struct, in wire order."""

    name: str
    type: str
    versions: str
    nullable: str = "none"
    tag: int | None = None
    tagged: str = "none"
    default: Any = MISSING
    ignorable: bool = False
    flexible: str | None = None  # overrides the message's flexible versions (header ClientId)
    fields: tuple[Field, ...] = ()
    key: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", snake_case(self.name))

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A struct (or array of structs): the element type is neither primitive nor variable."""
        element = self.element_type
        return element not in PRIMITIVE_TYPES and element not in VARIABLE_TYPES

    def present_in(self, version: int) -> bool:
        return version in parse_versions(self.versions)

    def nullable_in(self, version: int) -> bool:
        return version in parse_versions(self.nullable)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in parse_versions(self.tagged)


@dataclass(frozen=True)
class ApiSchema:
    """Everything the codec knows about one API key.

    `valid_versions` / `flexible_versions` use the spec syntax and hold for both the request
    and the response.  Quirks are data:

    * `response_header_v0_always` -- the response header stays v0 (no tagged fields) even for
      flexible versions (ApiVersions, so a client can parse the answer before it knows which
      versions the broker speaks).
    * `unsupported_version_response` -- the version whose response layout answers a request of a
      version outside `valid_versions` (ApiVersions answers with v0 + UNSUPPORTED_VERSION).
    * `request_header_v0_versions` -- versions whose request header has no client id
      (ControlledShutdown v0 in Kafka; none of the APIs in this table).
    """

    api_key: int
    name: str
    valid_versions: str
    flexible_versions: str
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    deprecated_versions: str = "none"
    latest_version_unstable: bool = False
    response_header_v0_always: bool = False
    unsupported_version_response: int | None = None
    request_header_v0_versions: str = "none"
    notes: str = ""

    @property
    def min_version(self) -> int:
        return parse_versions(self.valid_versions).low

    @property
    def max_version(self) -> int:
        return parse_versions(self.valid_versions).high

    @property
    def flexible_from(self) -> int | None:
        flexible = parse_versions(self.flexible_versions)
        return None if flexible.empty else flexible.low

    def supports(self, version: int) -> bool:
        return version in parse_versions(self.valid_versions)

    def is_flexible(self, version: int) -> bool:
        return version in parse_versions(self.flexible_versions)

    def request_header_version(self, version: int) -> int:
        if version in parse_versions(self.request_header_v0_versions):
            return 0
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.response_header_v0_always:
            return 0
        return 1 if self.is_flexible(version) else 0
