"""The admin listener: hypercorn serving an ASGI application on Trio, with the admin limits.

Why these libraries: hypercorn is the maintained ASGI server with a native Trio worker (the
broker is one Trio program; an asyncio server would need a second event loop), it speaks
HTTP/1.1 (h11) and HTTP/2 (h2) with their header-size limits and keep-alive handling, and TLS
comes from the same `ssl.SSLContext` the Kafka listener uses.  The application is Starlette
(gateway/admin/app.py), which runs on Trio through anyio.  Nothing here parses HTTP by hand.

Limits (docs/admin.md, "Admin HTTP API"): a request head over MAX_HEAD_BYTES is answered 431 (h11's
incomplete-event limit); a body over MAX_BODY_BYTES 413 -- from Content-Length before reading,
or while reading an HTTP/2 body; a chunked HTTP/1.1 body 411; a malformed request 400 (h11).
A head must arrive within REQUEST_TIMEOUT_S of connecting or of the previous answer (also the
keep-alive idle limit), each read within REQUEST_TIMEOUT_S, a whole body within
REQUEST_TIMEOUT_S (else 408), and at most MAX_CONNECTIONS connections are served at once (the
rest wait in the listen backlog).  hypercorn has no connection limit of its own, so `serve`
runs hypercorn's per-connection server (`hypercorn.trio.tcp_server.TCPServer`) under a
`trio.CapacityLimiter`; the hypercorn version range is pinned in pyproject.toml for this.

`HttpRequest`/`HttpResponse`/`HttpError` are what admin handlers see: plain data, so handlers
are tested without a server.

This module must never import protocol or storage code: it only moves requests to handlers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

log = logging.getLogger("ledgerwire.admin.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1 << 20
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
    client: str = ""
    identity: Any = None  # gateway.admin.auth.Identity, set before the handler runs
    raw_target: str = ""  # path and query as sent
    scheme: str = "http"

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

    def form(self) -> dict[str, str]:
        """An application/x-www-form-urlencoded body (the console's forms); {} otherwise."""
        content_type = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded" or not self.body:
            return {}
        try:
            pairs = parse_qs(self.body.decode("utf-8"), keep_blank_values=True,
                             max_num_fields=100, strict_parsing=True)
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, "the form is not URL-encoded UTF-8") from None
        return {k: v[-1] for k, v in pairs.items()}


@dataclass
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> HttpResponse:
        return cls(status, json.dumps(value, indent=1, sort_keys=True).encode() + b"\n")

    @classmethod
    def text(cls, text: str, content_type: str = "text/plain; charset=utf-8",
             status: int = 200) -> HttpResponse:
        return cls(status, text.encode(), content_type)


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": message}).encode() + b"\n"


async def _send_error(send: Send, status: int, message: str) -> None:
    body = error_body(status, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimits:
    """ASGI middleware: refuse chunked and oversize bodies, bound the time a body may take."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = -1
        for name, value in scope.get("headers", ()):
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                await _send_error(send, 411, "chunked bodies are not accepted; "
                                             "send Content-Length")
                return
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -2
        if length == -2 or length < -1:
            await _send_error(send, 400, "bad Content-Length")
            return
        if length > MAX_BODY_BYTES:
            await _send_error(send, 413, f"body over {MAX_BODY_BYTES} bytes")
            return
        received = 0
        deadline = trio.current_time() + REQUEST_TIMEOUT_S

        async def bounded_receive() -> Message:
            nonlocal received
            with trio.move_on_at(deadline) as scope_:
                message = await receive()
            if scope_.cancelled_caught:
                raise HttpError(408, "the request body took too long")
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    raise HttpError(413, f"body over {MAX_BODY_BYTES} bytes")
            return message

        await self.app(scope, bounded_receive, send)


def hypercorn_config() -> HypercornConfig:
    config = HypercornConfig()
    config.h11_max_incomplete_size = MAX_HEAD_BYTES
    config.h2_max_header_list_size = MAX_HEAD_BYTES
    config.keep_alive_timeout = REQUEST_TIMEOUT_S
    config.read_timeout = int(REQUEST_TIMEOUT_S)
    config.ssl_handshake_timeout = REQUEST_TIMEOUT_S
    config.graceful_timeout = 2.0
    config.include_server_header = False
    config.accesslog = None
    config.errorlog = log
    return config


def admin_ssl_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server context for the admin listener from the Kafka listener's certificate settings
    (a context of its own: ALPN offers h2 and http/1.1 here, not on the Kafka port)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


async def serve(app: ASGIApp, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` until cancelled; `task_status.started(bound port)`."""
    listeners: list[Any] = list(await trio.open_tcp_listeners(port, host=host or None))
    bound = listeners[0].socket.getsockname()[1]
    if ssl_context is not None:
        listeners = [trio.SSLListener(listener, ssl_context, https_compatible=True)
                     for listener in listeners]
    await _serve_listeners(app, listeners, f"{'https' if ssl_context else 'http'}://{host}:{bound}",
                           bound, task_status)


async def serve_unix(app: ASGIApp, path: str, *,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on a unix socket at `path` (replacing a stale one) until cancelled; plain
    HTTP, for a parent process only (the caller picks a private directory);
    `task_status.started(None)`."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(socket.SOMAXCONN)
    await _serve_listeners(app, [trio.SocketListener(sock)], f"unix:{path}", None, task_status)


async def _serve_listeners(app: ASGIApp, listeners: list[Any], where: str, started: Any,
                           task_status: Any) -> None:
    config = hypercorn_config()
    wrapped = wrap_app(cast(Any, BodyLimits(app)), config.wsgi_max_body_size, "asgi")
    context = WorkerContext(None)
    limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def connection(stream: trio.abc.Stream) -> None:
        async with limiter:
            await TCPServer(wrapped, config, context, ConnectionState({}),
                            cast(Any, stream)).run()

    async with trio.open_nursery() as nursery:
        task_status.started(started)
        log.info("admin http listening", extra={"admin": where})
        await trio.serve_listeners(partial(connection), listeners, handler_nursery=nursery)
