"""The wire format of the shared metadata store (shared_server.py <-> shared_client.py).

Sans-IO: bytes in, typed values out, and back.  A frame is a 4-byte big-endian length and a
JSON object; node data travels base64-encoded.  `FrameBuffer` refuses a length above
MAX_FRAME_BYTES before allocating and never consumes half a frame.

Client -> server:  {"id": n, "op": name, ...arguments}
Server -> client:  {"id": n, "ok": result}  or  {"id": n, "err": ErrorClassName, "msg": text}
                   {"w": watch_id, "path": p, "kind": k}   (a watch event)
The first request of a connection is "hello" (its answer names the session); "ping" keeps the
session alive; "close" ends it (its ephemeral nodes go) before the socket closes.

This module must never touch a socket, Trio or sqlite.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from .store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SessionExpiredError,
    SetOp,
    Stat,
)

MAX_FRAME_BYTES = 32 << 20  # metadata nodes are small; a larger frame is a broken peer
PROTOCOL_VERSION = 1
_LENGTH = struct.Struct(">I")

_ERRORS: dict[str, type[MetadataError]] = {cls.__name__: cls for cls in (
    MetadataError, NoNodeError, NodeExistsError, BadVersionError, NotEmptyError,
    SessionExpiredError, MetadataUnavailableError)}


class WireError(MetadataError):
    """The peer sent something this protocol does not allow (the connection is closed)."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body


class FrameBuffer:
    """Accumulates received bytes and yields whole decoded frames."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        frames: list[dict[str, Any]] = []
        while len(self._buffer) >= 4:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > self._max:
                raise WireError(f"metadata frame of {length} bytes exceeds {self._max}")
            if len(self._buffer) < 4 + length:
                break
            body = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            try:
                message = json.loads(body)
            except ValueError as exc:
                raise WireError(f"undecodable metadata frame: {exc}") from None
            if not isinstance(message, dict):
                raise WireError("a metadata frame must be a JSON object")
            frames.append(message)
        return frames


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise WireError("node data must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise WireError("node data is not valid base64") from None


def stat_to_wire(stat: Stat) -> list[Any]:
    return [stat.version, stat.ctime_ms, stat.mtime_ms, stat.ephemeral, stat.num_children]


def stat_from_wire(value: Any) -> Stat:
    if not isinstance(value, list) or len(value) != 5:
        raise WireError("a Stat is a list of five values")
    return Stat(int(value[0]), int(value[1]), int(value[2]), bool(value[3]), int(value[4]))


def op_to_wire(op: Op) -> dict[str, Any]:
    if isinstance(op, CreateOp):
        return {"t": "create", "path": op.path, "data": b64(op.data),
                "ephemeral": op.ephemeral, "sequential": op.sequential}
    if isinstance(op, SetOp):
        return {"t": "set", "path": op.path, "data": b64(op.data), "version": op.version}
    if isinstance(op, DeleteOp):
        return {"t": "delete", "path": op.path, "version": op.version}
    if isinstance(op, CheckOp):
        return {"t": "check", "path": op.path, "version": op.version}
    raise TypeError(f"not a metadata op: {op!r}")


def op_from_wire(value: Any) -> Op:
    if not isinstance(value, dict):
        raise WireError("an op is a JSON object")
    kind, path = value.get("t"), value.get("path")
    if not isinstance(path, str):
        raise WireError("an op needs a string path")
    if kind == "create":
        return CreateOp(path, unb64(value.get("data", "")), bool(value.get("ephemeral")),
                        bool(value.get("sequential")))
    if kind == "set":
        return SetOp(path, unb64(value.get("data", "")), _int(value.get("version", -1)))
    if kind == "delete":
        return DeleteOp(path, _int(value.get("version", -1)))
    if kind == "check":
        return CheckOp(path, _int(value.get("version")))
    raise WireError(f"unknown op type {kind!r}")


def results_to_wire(results: list[OpResult]) -> list[Any]:
    return [{"s": stat_to_wire(r)} if isinstance(r, Stat) else r for r in results]


def results_from_wire(value: Any) -> list[OpResult]:
    if not isinstance(value, list):
        raise WireError("multi results are a list")
    out: list[OpResult] = []
    for item in value:
        out.append(stat_from_wire(item["s"]) if isinstance(item, dict) else item)
    return out


def error_to_wire(request_id: Any, exc: Exception) -> dict[str, Any]:
    name = type(exc).__name__
    if name not in _ERRORS:
        name = "ValueError" if isinstance(exc, ValueError) else "MetadataError"
    return {"id": request_id, "err": name, "msg": str(exc)}


def error_from_wire(message: dict[str, Any]) -> Exception:
    name, text = message.get("err"), str(message.get("msg", ""))
    if name == "ValueError":
        return ValueError(text)
    cls = _ERRORS.get(name if isinstance(name, str) else "", MetadataError)
    return cls(text)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError("a version must be an integer")
    return value


def str_arg(message: dict[str, Any], key: str) -> str:
    value = message.get(key)
    if not isinstance(value, str):
        raise WireError(f"{key} must be a string")
    return value


def int_arg(message: dict[str, Any], key: str, default: int | None = None) -> int:
    value = message.get(key, default)
    return _int(value)
