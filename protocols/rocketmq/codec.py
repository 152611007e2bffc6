"""The RocketMQ 4.x remoting frame codec (sans-IO): bytes in, `RemotingCommand` out, and back.

A frame is: int32 length (4 + header length + body length), int32 whose high byte is the header
serialisation (0 = JSON, 1 = ROCKETMQ binary) and whose low three bytes are the header length,
the header, the body.  `FrameReader` buffers a byte stream and cuts it into frames, refusing an
oversize length prefix before allocating anything for the frame.  A response is encoded in the
serialisation its request used (the C++ client only understands JSON; it ignores the type byte).

extFields values are strings on the wire from Java, JSON numbers or booleans from the C++
client and ali-ons: decoding turns every value into a string so handlers see one form, and the
`ext_*` helpers parse them leniently.  Responses always carry string values (the C++ client
reads a response field only when it is a JSON string).

JSON headers are read and written with orjson (a well-kept Rust JSON library: for these small
maps about 2x faster to parse and >10x faster to write than the standard library, which every
request and response pays).  What orjson refuses or reads differently from the standard library
(integers beyond 64 bits, which it reads as floats; lone surrogate escapes, UTF-16/32 text) goes
through the standard library, so the accepted input is exactly what it was; orjson writes
non-ASCII text as UTF-8 rather than "\\u" escapes, which is the same JSON.

This module must never touch a socket, Trio, or broker state.
"""

from __future__ import annotations

import itertools
import json
import struct
from dataclasses import dataclass, field

import orjson

from protocols.rocketmq.errors import FrameTooLargeError, MalformedFrameError

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST")
SERVER_VERSION = 395  # V4_9_4: what a 4.9 broker reports

DEFAULT_MAX_FRAME_BYTES = 16 << 20
DEFAULT_MAX_HEADER_BYTES = 1 << 20

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")

_opaque_counter = itertools.count(1)
# one encoder for every header: json.dumps(..., separators=...) builds a new one per call
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"))


def next_opaque() -> int:
    """A fresh opaque for a request this side starts (broker -> client)."""
    return next(_opaque_counter) & 0x7FFFFFFF


@dataclass
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = SERVER_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def make_response(request: RemotingCommand, code: int, remark: str | None = None,
                  ext_fields: dict[str, object] | None = None,
                  body: bytes = b"") -> RemotingCommand:
    ext = {k: v if type(v) is str else ext_str(v)
           for k, v in (ext_fields or {}).items() if v is not None}
    return RemotingCommand(code=int(code), opaque=request.opaque, flag=FLAG_RESPONSE,
                           remark=remark, ext_fields=ext, body=body,
                           serialize_type=request.serialize_type)


def make_request(code: int, ext_fields: dict[str, object] | None = None, body: bytes = b"",
                 *, oneway: bool = False, serialize_type: int = SERIALIZE_JSON,
                 opaque: int | None = None) -> RemotingCommand:
    ext = {k: ext_str(v) for k, v in (ext_fields or {}).items() if v is not None}
    return RemotingCommand(code=code, opaque=next_opaque() if opaque is None else opaque,
                           flag=FLAG_ONEWAY if oneway else 0, ext_fields=ext, body=body,
                           serialize_type=serialize_type)


# --- extFields values -------------------------------------------------------------------------


def ext_str(value: object) -> str:
    kind = type(value)  # the common kinds first: this runs for most fields of every frame
    if kind is str:
        return value  # type: ignore[return-value]
    if kind is int:
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


# --- framing ----------------------------------------------------------------------------------


class FrameReader:
    """Cuts a byte stream into frames (each without its 4-byte length prefix)."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        frames: list[bytes] = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = _INT32.unpack_from(buf, pos)
            if length < 4:
                raise MalformedFrameError(f"frame length {length} is below the minimum of 4")
            if length > self.max_frame_bytes:
                raise FrameTooLargeError(
                    f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}")
            if len(buf) - pos - 4 < length:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


# --- decode -----------------------------------------------------------------------------------


def decode_command(frame: bytes, *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
                   ) -> RemotingCommand:
    """Decode one frame (without the length prefix); MalformedFrameError on anything odd."""
    if len(frame) < 4:
        raise MalformedFrameError("frame too short for its header length")
    (word,) = _UINT32.unpack_from(frame, 0)
    serialize_type = word >> 24
    header_length = word & 0xFFFFFF
    if header_length > max_header_bytes:
        raise FrameTooLargeError(
            f"header of {header_length} bytes exceeds the limit of {max_header_bytes}")
    if header_length > len(frame) - 4:
        raise MalformedFrameError(
            f"header length {header_length} runs past the frame of {len(frame)} bytes")
    header = frame[4 : 4 + header_length]
    body = frame[4 + header_length :]
    if serialize_type == SERIALIZE_JSON:
        command = _decode_json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        command = _decode_binary_header(header)
    else:
        raise MalformedFrameError(f"unknown header serialisation {serialize_type}")
    command.body = body
    command.serialize_type = serialize_type
    return command


def _int_field(doc: dict[str, object], name: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        raise MalformedFrameError(f"header field {name!r} is missing or not an integer")
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError) as exc:
        raise MalformedFrameError(f"header field {name!r} is not an integer") from exc


def _exact_with_orjson(doc: object) -> bool:
    """False when orjson's reading may differ from the standard library's: orjson reads an
    integer beyond 64 bits as a float (the standard library keeps it exact), so any float
    among the fields read, or a nested container, is read again with the standard library."""
    if type(doc) is not dict:  # orjson gives exact types, never subclasses
        return True
    for key, value in doc.items():
        kind = type(value)
        if kind is float or (kind in _CONTAINERS and key != "extFields"):
            return False
    ext = doc.get("extFields")
    if type(ext) is dict:
        for value in ext.values():
            if type(value) in _INEXACT:
                return False
    return True


_CONTAINERS = (dict, list)
_INEXACT = (float, dict, list)


def _load_json(header: bytes) -> object:
    try:
        doc = orjson.loads(header)
        if _exact_with_orjson(doc):
            return doc
    except orjson.JSONDecodeError:
        pass  # maybe what only the standard library reads (see the module docstring)
    try:
        return json.loads(header)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # too deep: RecursionError
        raise MalformedFrameError(f"header is not JSON: {exc}") from exc


def _decode_json_header(header: bytes) -> RemotingCommand:
    doc = _load_json(header)
    if not isinstance(doc, dict):
        raise MalformedFrameError("JSON header is not an object")
    ext_raw = doc.get("extFields") or {}
    if not isinstance(ext_raw, dict):
        raise MalformedFrameError("extFields is not an object")
    # keys of a JSON object are strings already; most values are too
    ext = {k: v if type(v) is str else ext_str(v) for k, v in ext_raw.items() if v is not None}
    language = doc.get("language", "JAVA")
    if isinstance(language, int) and 0 <= language < len(LANGUAGES):
        language = LANGUAGES[language]
    remark = doc.get("remark")
    # every request has these four as JSON integers: _int_field (its checks and lenient
    # reading) only for what is not one, or missing
    code, opaque, flag, version = (doc.get("code"), doc.get("opaque", 0), doc.get("flag", 0),
                                   doc.get("version", 0))
    return RemotingCommand(
        code=code if type(code) is int else _int_field(doc, "code"),
        opaque=opaque if type(opaque) is int else _int_field(doc, "opaque", 0),
        flag=flag if type(flag) is int else _int_field(doc, "flag", 0),
        language=language if type(language) is str else str(language),
        version=version if type(version) is int else _int_field(doc, "version", 0),
        remark=None if remark is None else str(remark),
        ext_fields=ext,
    )


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_length,) = _INT32.unpack_from(header, pos)
        pos += 4
        if remark_length < 0 or pos + remark_length > len(header):
            raise MalformedFrameError("remark runs past the header")
        remark = header[pos : pos + remark_length].decode("utf-8") if remark_length else None
        pos += remark_length
        (ext_length,) = _INT32.unpack_from(header, pos)
        pos += 4
        if ext_length < 0 or pos + ext_length != len(header):
            raise MalformedFrameError("extFields length does not match the header length")
        ext: dict[str, str] = {}
        end = pos + ext_length
        while pos < end:
            (key_length,) = _I16.unpack_from(header, pos)
            pos += 2
            if key_length < 0 or pos + key_length > end:
                raise MalformedFrameError("extFields key runs past the header")
            key = header[pos : pos + key_length].decode("utf-8")
            pos += key_length
            (value_length,) = _INT32.unpack_from(header, pos)
            pos += 4
            if value_length < 0 or pos + value_length > end:
                raise MalformedFrameError("extFields value runs past the header")
            ext[key] = header[pos : pos + value_length].decode("utf-8")
            pos += value_length
    except struct.error as exc:
        raise MalformedFrameError(f"binary header truncated: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise MalformedFrameError(f"binary header text is not UTF-8: {exc}") from exc
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=LANGUAGES[language] if language < len(LANGUAGES) else "OTHER",
        version=version,
        remark=remark,
        ext_fields=ext,
    )


# --- encode -----------------------------------------------------------------------------------


def encode_command(command: RemotingCommand) -> bytes:
    """The full frame, length prefix included, in `command.serialize_type`."""
    if command.serialize_type == SERIALIZE_ROCKETMQ:
        header = _encode_binary_header(command)
    else:
        header = _encode_json_header(command)
    if len(header) > 0xFFFFFF:
        raise ValueError("header too large to encode")
    body = command.body
    return b"".join((
        _INT32.pack(4 + len(header) + len(body)),
        _UINT32.pack((command.serialize_type << 24) | len(header)),
        header,
        body,
    ))


def _encode_json_header(command: RemotingCommand) -> bytes:
    doc: dict[str, object] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        doc["remark"] = command.remark
    doc["extFields"] = command.ext_fields
    try:
        return orjson.dumps(doc)
    except TypeError:  # a lone surrogate (or a value orjson does not write): as before
        return _JSON_ENCODER.encode(doc).encode("utf-8")


def _encode_binary_header(command: RemotingCommand) -> bytes:
    try:
        language = LANGUAGES.index(command.language)
    except ValueError:
        language = LANGUAGES.index("OTHER")
    parts = [_BINARY_FIXED.pack(command.code, language, command.version, command.opaque,
                                command.flag)]
    remark = (command.remark or "").encode("utf-8")
    parts += [_INT32.pack(len(remark)), remark]
    ext = bytearray()
    for key, value in command.ext_fields.items():
        k = key.encode("utf-8")
        v = value.encode("utf-8")
        ext += _I16.pack(len(k)) + k + _INT32.pack(len(v)) + v
    parts += [_INT32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)
