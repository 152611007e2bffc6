"""The sans-IO Kafka codec: request frames to (header, dict), response dicts to frames.

Everything is driven by the schema table (`protocols.kafka.schema.SCHEMAS`); each
(api key, version, direction) is compiled once, on first use, into closures
(`schema_compiler.compile_struct`).  Bodies are dicts keyed by the snake_case names of the
spec's fields; arrays are lists of dicts; records fields are memoryviews into the frame.

Header rules (data in the table): request header v1, or v2 for flexible versions, with a
ClientId that is never compact; response header v0, or v1 for flexible versions -- except
ApiVersions, which always answers with header v0 and answers a version it does not know with
its v0 layout.

`encode_response` returns one bytes frame; `encode_response_buffers` returns the same frame as a
list of buffers in which large records blocks (stored batches) appear uncopied, for one
vectored send.

Errors: undecodable input raises `MalformedRequestError` (close the connection); an API key or
version outside the table raises `UnsupportedVersionError` carrying whatever header could be
read (for ApiVersions that is enough to answer).  No other exception escapes `decode_request`.
This module never touches sockets or Trio and never interprets record batches.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from .errors import MalformedRequestError, UnsupportedVersionError
from .schema import SCHEMAS, ApiSchema
from .schema.headers import REQUEST_HEADER, RESPONSE_HEADER
from .schema_compiler import CompiledStruct, PreEncoded, compile_struct
from .types import SegmentedOutput, string_reader

__all__ = [
    "SCHEMAS",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_buffers",
    "supported_api_versions",
]

_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_INT32 = struct.Struct(">i")
_FRAME_SIZE_MAX: Final = 0x7FFFFFFF

# Exceptions the compiled readers can raise on hostile input besides MalformedRequestError.
_DECODE_FAILURES = (struct.error, ValueError, IndexError, OverflowError)


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    header: CompiledStruct
    body: CompiledStruct
    header_version: int
    name: str  # the API's name, for error messages


_REQUESTS: dict[tuple[int, int], _Compiled] = {}
_RESPONSES: dict[tuple[int, int], _Compiled] = {}
_HEADERS: dict[tuple[str, int], CompiledStruct] = {}


def _header_codec(kind: str, header_version: int) -> CompiledStruct:
    compiled = _HEADERS.get((kind, header_version))
    if compiled is None:
        fields = REQUEST_HEADER if kind == "request" else RESPONSE_HEADER
        flexible = header_version >= (2 if kind == "request" else 1)
        compiled = compile_struct(fields, header_version, flexible)
        _HEADERS[(kind, header_version)] = compiled
    return compiled


def _request_codec(schema: ApiSchema, version: int) -> _Compiled:
    key = (schema.api_key, version)
    compiled = _REQUESTS.get(key)
    if compiled is None:
        header_version = schema.request_header_version(version)
        compiled = _Compiled(
            _header_codec("request", header_version),
            compile_struct(schema.request, version, schema.is_flexible(version)),
            header_version,
            schema.name,
        )
        _REQUESTS[key] = compiled
    return compiled


def _response_codec(schema: ApiSchema, version: int) -> _Compiled:
    key = (schema.api_key, version)
    compiled = _RESPONSES.get(key)
    if compiled is None:
        header_version = schema.response_header_version(version)
        compiled = _Compiled(
            _header_codec("response", header_version),
            compile_struct(schema.response, version, schema.is_flexible(version)),
            header_version,
            schema.name,
        )
        _RESPONSES[key] = compiled
    return compiled


_ELEMENTS: dict[tuple[int, int, tuple[str, ...]], CompiledStruct] = {}


def encode_response_element(api_key: int, version: int, path: tuple[str, ...],
                            value: dict[str, Any]) -> PreEncoded:
    """One element of a struct array of a response (`path`: the array fields' keys from the
    body down, e.g. ("topics", "partitions")), encoded now for `version`; put it in the body
    in place of the dict (e.g. cached Metadata topic entries)."""
    key = (api_key, version, path)
    compiled = _ELEMENTS.get(key)
    if compiled is None:
        schema = _schema_for(api_key, version)
        if schema is None:
            raise UnsupportedVersionError(f"API key {api_key} version {version} is not supported")
        fields = schema.response
        for name in path:
            fields = next(f for f in fields if f.key == name).fields
        compiled = compile_struct(fields, version, schema.is_flexible(version))
        _ELEMENTS[key] = compiled
    out = bytearray()
    compiled.encode(value, out)
    return PreEncoded(out)


def precompile_all() -> None:
    """Compile every (api, version) now instead of on first use (e.g. at server start)."""
    for schema in SCHEMAS.values():
        for version in range(schema.min_version, schema.max_version + 1):
            _request_codec(schema, version)
            _response_codec(schema, version)


def _schema_for(api_key: int, api_version: int) -> ApiSchema | None:
    schema = SCHEMAS.get(api_key)
    if schema is None or not schema.supports(api_version):
        return None
    return schema


_read_client_id = string_reader(compact=False, nullable=True)


def _partial_header(buf: memoryview, api_key: int, version: int, corr: int) -> RequestHeader:
    """The header of a request we cannot parse further; the client id only if it is readable."""
    client_id: str | None = None
    try:
        client_id, _ = _read_client_id(buf, _HEADER_PREFIX.size)
    except (MalformedRequestError, *_DECODE_FAILURES):
        client_id = None
    return RequestHeader(api_key, version, corr, client_id)


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict[str, Any]]:
    """One request frame (without its 4-byte size prefix) -> (header, body dict)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    if len(buf) < _HEADER_PREFIX.size:
        raise MalformedRequestError(f"request of {len(buf)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(buf, 0)
    # Only supported (api key, version) pairs are ever compiled, so a hit needs no check.
    compiled = _REQUESTS.get((api_key, api_version))
    if compiled is None:
        schema = _schema_for(api_key, api_version)
        if schema is None:
            header = _partial_header(buf, api_key, api_version, correlation_id)
            raise UnsupportedVersionError(
                f"API key {api_key} version {api_version} is not supported", header=header
            )
        compiled = _request_codec(schema, api_version)
    try:
        header_fields, pos = compiled.header.decode(buf, 0)
        body, pos = compiled.body.decode(buf, pos)
    except _DECODE_FAILURES as exc:
        raise MalformedRequestError(
            f"cannot decode {compiled.name} v{api_version} request: {exc}"
        ) from exc
    # Trailing bytes are tolerated, as the Kafka broker does.
    return RequestHeader(api_key, api_version, correlation_id, header_fields["client_id"]), body


def _framed(out: bytearray) -> bytes:
    size = len(out) - 4
    if size > _FRAME_SIZE_MAX:
        raise ValueError("frame larger than 2 GiB")
    _INT32.pack_into(out, 0, size)
    return bytes(out)


def _response_compiled(header: RequestHeader) -> _Compiled:
    compiled = _RESPONSES.get((header.api_key, header.api_version))
    if compiled is not None:  # only supported versions are ever compiled under their own key
        return compiled
    schema = SCHEMAS.get(header.api_key)
    if schema is None:
        raise UnsupportedVersionError(f"unknown API key {header.api_key}", header=header)
    version = header.api_version
    if not schema.supports(version):
        if schema.unsupported_version_response is None:
            raise UnsupportedVersionError(
                f"{schema.name} version {version} is not supported", header=header
            )
        version = schema.unsupported_version_response
    return _response_codec(schema, version)


def encode_response(header: RequestHeader, body: dict[str, Any]) -> bytes:
    """The full response frame (with its 4-byte size prefix) answering `header`.

    For an ApiVersions request of a version outside the table the v0 layout is used (the
    caller puts UNSUPPORTED_VERSION and the supported range in `body`).
    """
    compiled = _response_compiled(header)
    out = bytearray(4)
    compiled.header.encode({"correlation_id": header.correlation_id}, out)
    compiled.body.encode(body, out)
    return _framed(out)


def encode_response_buffers(header: RequestHeader, body: dict[str, Any]) -> list[Any]:
    """The same frame as `encode_response`, as a list of buffers for one vectored send.

    Large records blocks (stored batches) are among the buffers as they were given, uncopied;
    the caller must not change them until the buffers are sent.  Concatenated, the buffers
    are exactly `encode_response(header, body)`.
    """
    compiled = _response_compiled(header)
    out = SegmentedOutput(b"\0\0\0\0")
    compiled.header.encode({"correlation_id": header.correlation_id}, out)
    compiled.body.encode(body, out)
    buffers = out.segments()
    size = sum(len(b) if type(b) is not memoryview else b.nbytes for b in buffers) - 4
    if size > _FRAME_SIZE_MAX:
        raise ValueError("frame larger than 2 GiB")
    _INT32.pack_into(buffers[0], 0, size)
    return buffers


def encode_request(header: RequestHeader, body: dict[str, Any]) -> bytes:
    """The full request frame (with its 4-byte size prefix); for tests and tools."""
    schema = _schema_for(header.api_key, header.api_version)
    if schema is None:
        raise UnsupportedVersionError(
            f"API key {header.api_key} version {header.api_version} is not supported",
            header=header,
        )
    compiled = _request_codec(schema, header.api_version)
    out = bytearray(4)
    compiled.header.encode(
        {
            "request_api_key": header.api_key,
            "request_api_version": header.api_version,
            "correlation_id": header.correlation_id,
            "client_id": header.client_id,
        },
        out,
    )
    compiled.body.encode(body, out)
    return _framed(out)


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """One response frame (without its size prefix) -> (correlation id, body dict)."""
    schema = _schema_for(api_key, api_version)
    if schema is None:
        raise UnsupportedVersionError(f"API key {api_key} version {api_version} is not supported")
    compiled = _response_codec(schema, api_version)
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        header_fields, pos = compiled.header.decode(buf, 0)
        body, _ = compiled.body.decode(buf, pos)
    except _DECODE_FAILURES as exc:
        raise MalformedRequestError(f"cannot decode {schema.name} v{api_version} response") from exc
    return header_fields["correlation_id"], body


def supported_api_versions(*, include_unstable: bool = False) -> list[dict[str, int]]:
    """ApiVersions entries (api_key, min_version, max_version) for every API in the table.

    A spec's last version marked unstable (`latestVersionUnstable`) is left out unless
    `include_unstable`, as Kafka brokers do by default.
    """
    entries = []
    for schema in SCHEMAS.values():
        max_version = schema.max_version
        if schema.latest_version_unstable and not include_unstable:
            max_version -= 1
        entries.append(
            {
                "api_key": schema.api_key,
                "min_version": schema.min_version,
                "max_version": max_version,
            }
        )
    return entries
