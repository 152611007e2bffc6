"""A small HTTP/1.1 server on Trio for the admin API and /metrics (no framework).

One task per connection; keep-alive is honoured (HTTP/1.1 default, `Connection: close` ends
it).  Limits keep a bad or slow client from costing more than a little memory and one task:
the request head may be at most MAX_HEAD_BYTES, a body at most MAX_BODY_BYTES (checked from
Content-Length *before* reading it; chunked bodies are refused with 411), each request must
arrive within REQUEST_TIMEOUT_S, and an idle keep-alive connection is closed after
IDLE_TIMEOUT_S.  A malformed request gets a 400 and the connection is closed.

Routing: `Router.add(method, "/admin/v1/topics/{topic}", handler)`; a handler is
`async (HttpRequest) -> HttpResponse`.  A handler raising `HttpError` answers its status with a
JSON {"error": ...}; any other exception is logged and answered 500.

This module must never import protocol or storage code: it only moves bytes and calls handlers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import trio

log = logging.getLogger("ledgerwire.admin.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1 << 20
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 256
_REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request",
            404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class HttpRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"body is not JSON: {exc}") from None

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"

    @classmethod
    def json(cls, value: Any, status: int = 200) -> HttpResponse:
        return cls(status, json.dumps(value, indent=1, sort_keys=True).encode() + b"\n")

    @classmethod
    def text(cls, text: str, content_type: str = "text/plain; charset=utf-8",
             status: int = 200) -> HttpResponse:
        return cls(status, text.encode(), content_type)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, list[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        self._routes.append((method.upper(), pattern.strip("/").split("/"), handler))

    def routes(self) -> list[tuple[str, str]]:
        return [(m, "/" + "/".join(parts)) for m, parts, _ in self._routes]

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        segments = [unquote(s) for s in path.strip("/").split("/")]
        path_known = False
        for route_method, parts, handler in self._routes:
            if len(parts) != len(segments):
                continue
            params: dict[str, str] = {}
            for part, seg in zip(parts, segments, strict=True):
                if part.startswith("{") and part.endswith("}"):
                    if not seg:
                        break
                    params[part[1:-1]] = seg
                elif part != seg:
                    break
            else:
                path_known = True
                if route_method == method:
                    return handler, params
        if path_known:
            raise HttpError(405, f"{method} not allowed on {path}")
        raise HttpError(404, f"no such endpoint: {path}")


class _Reader:
    """Reads a request head and body from a stream with the limits above."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def head(self) -> bytes | None:
        """The bytes up to the blank line, or None when the peer closed before sending any."""
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self._buffer[:end])
                del self._buffer[:end + 4]
                return head
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise HttpError(431, "request head too large")
            data = await self._stream.receive_some(65536)
            if not data:
                if self._buffer:
                    raise HttpError(400, "connection closed inside a request head")
                return None
            self._buffer += data

    async def body(self, length: int) -> bytes:
        while len(self._buffer) < length:
            data = await self._stream.receive_some(65536)
            if not data:
                raise HttpError(400, "connection closed inside a request body")
            self._buffer += data
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body


def parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise HttpError(400, "undecodable head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "bad request line")
    method, target, version = parts
    if not method.isalpha() or not target.startswith("/"):
        raise HttpError(400, "bad request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"bad header line {line[:40]!r}")
        headers[name.lower()] = value.strip()
    return method.upper(), target, version, headers


def encode_response(resp: HttpResponse, keep_alive: bool, head_only: bool = False) -> bytes:
    reason = _REASONS.get(resp.status, "Status")
    head = (f"HTTP/1.1 {resp.status} {reason}\r\n"
            f"Content-Type: {resp.content_type}\r\n"
            f"Content-Length: {len(resp.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else resp.body)


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse.json({"error": message}, status)


async def _read_request(reader: _Reader) -> tuple[HttpRequest, bool] | None:
    head = await reader.head()
    if head is None:
        return None
    method, target, version, headers = parse_head(head)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "chunked bodies are not accepted; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(400, "bad Content-Length") from None
    if length < 0:
        raise HttpError(400, "bad Content-Length")
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"body over {MAX_BODY_BYTES} bytes")
    body = await reader.body(length)
    url = urlsplit(target)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return HttpRequest(method, url.path, parse_qs(url.query), headers, body), keep_alive


async def _handle_connection(router: Router, stream: trio.SocketStream) -> None:
    reader = _Reader(stream)
    try:
        async with stream:
            first = True
            while True:
                timeout = REQUEST_TIMEOUT_S if first else IDLE_TIMEOUT_S
                first = False
                request_and_keep: tuple[HttpRequest, bool] | None = None
                try:
                    with trio.fail_after(timeout):
                        request_and_keep = await _read_request(reader)
                except HttpError as exc:
                    await stream.send_all(encode_response(_error(exc.status, exc.message), False))
                    return
                except trio.TooSlowError:
                    return
                if request_and_keep is None:
                    return
                request, keep_alive = request_and_keep
                response = await _dispatch(router, request)
                with trio.fail_after(REQUEST_TIMEOUT_S):
                    await stream.send_all(encode_response(response, keep_alive,
                                                          request.method == "HEAD"))
                if not keep_alive:
                    return
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass


async def _dispatch(router: Router, request: HttpRequest) -> HttpResponse:
    method = "GET" if request.method == "HEAD" else request.method
    try:
        handler, params = router.match(method, request.path)
        request.params = params
        return await handler(request)
    except HttpError as exc:
        return _error(exc.status, exc.message)
    except Exception as exc:  # a handler bug answers 500 and the server keeps going
        log.exception("admin request failed", extra={"path": request.path})
        return _error(500, f"{type(exc).__name__}: {exc}")


async def serve_admin_http(router: Router, host: str, port: int, *,
                           task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; `task_status.started(bound port)`."""
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound = listeners[0].socket.getsockname()[1]
    limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def limited(stream: trio.SocketStream) -> None:
        async with limiter:
            await _handle_connection(router, stream)

    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        log.info("admin http listening", extra={"admin": f"{host}:{bound}"})
        await trio.serve_listeners(limited, listeners, handler_nursery=nursery)
