"""The admin listener (hypercorn on Trio + Starlette): routing, JSON errors, keep-alive, the
documented limits (411, 413, 431, timeouts) and refusal of malformed requests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from gateway.admin import http_server
from gateway.admin.app import AdminRoute, build_app, fixed
from gateway.admin.auth import PUBLIC, AdminAuth
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse, serve
from tests.operations.http_support import exchange, request


def echo_routes() -> list[AdminRoute]:
    async def echo(q: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"params": q.params, "body": q.json(), "x": q.arg("x")})

    async def boom(q: HttpRequest) -> HttpResponse:
        raise RuntimeError("handler bug with a secret detail")

    async def refuse(q: HttpRequest) -> HttpResponse:
        raise HttpError(409, "no")

    return [AdminRoute("POST", "/things/{name}", echo, fixed(PUBLIC)),
            AdminRoute("GET", "/boom", boom, fixed(PUBLIC)),
            AdminRoute("GET", "/refuse", refuse, fixed(PUBLIC))]


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = build_app(echo_routes(), AdminAuth(required=False))
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve, app, "127.0.0.1", 0)
        yield bound
        nursery.cancel_scope.cancel()


async def test_routes_params_query_and_json_body(port: int) -> None:
    status, doc = await request(port, "POST", "/things/a%20b?x=1", {"k": [1, 2]})
    assert status == 200
    assert doc == {"params": {"name": "a b"}, "body": {"k": [1, 2]}, "x": "1"}


async def test_errors_are_json_with_the_right_status(port: int) -> None:
    status, doc = await request(port, "GET", "/nowhere")
    assert status == 404 and "no such endpoint" in doc["error"]
    status, doc = await request(port, "GET", "/things/a")
    assert status == 405 and "not allowed" in doc["error"]
    assert await request(port, "GET", "/refuse") == (409, {"error": "no"})
    status, doc = await request(port, "GET", "/boom")
    assert status == 500 and "secret" not in doc["error"]  # no detail, no traceback
    status, doc = await request(port, "POST", "/things/a", None)
    assert status == 200
    raw = (b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close"
           b"\r\n\r\n{x]")
    assert b" 400 " in (await exchange(port, raw)).split(b"\r\n")[0]


async def test_keep_alive_serves_several_requests_on_one_connection(port: int) -> None:
    one = b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    last = b"POST /things/b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    answer = await exchange(port, one + one + last)
    assert answer.count(b"HTTP/1.1 200 ") == 3


@pytest.mark.parametrize(("raw", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
    (b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
    (b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400),
    (b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
     % (http_server.MAX_BODY_BYTES + 1), 413),
    (b"POST /things/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"GET /x HTTP/1.1\r\nX-Big: " + b"a" * (http_server.MAX_HEAD_BYTES + 10), 431),
])
async def test_bad_requests_get_an_error_and_the_connection_closes(
        port: int, raw: bytes, status: int) -> None:
    answer = await exchange(port, raw)
    assert answer.split(b"\r\n")[0].startswith(b"HTTP/1.1 %d " % status)


async def test_a_slow_client_is_disconnected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "REQUEST_TIMEOUT_S", 0.3)
    app = build_app(echo_routes(), AdminAuth(required=False))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, app, "127.0.0.1", 0)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /boom HTTP/1.1\r\n")  # never finishes the head
            with trio.fail_after(10):
                assert await stream.receive_some(100) == b""
        # a body that stops arriving is answered 408
        answer = await exchange(port, b"POST /things/a HTTP/1.1\r\nHost: x\r\n"
                                      b"Content-Length: 100\r\n\r\n{", read_timeout_s=10)
        assert answer.startswith(b"HTTP/1.1 408 ")
        nursery.cancel_scope.cancel()


async def test_server_survives_a_client_that_vanishes_mid_body(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"POST /things/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    await stream.aclose()
    assert (await request(port, "GET", "/refuse"))[0] == 409


async def test_connections_beyond_the_limit_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 2)
    monkeypatch.setattr(http_server, "REQUEST_TIMEOUT_S", 4.0)  # idle connections close sooner
    app = build_app(echo_routes(), AdminAuth(required=False))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, app, "127.0.0.1", 0)
        idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        with trio.move_on_after(1.0) as waited:
            await request(port, "GET", "/refuse")
        assert waited.cancelled_caught  # the third connection is not served yet
        await idle[0].aclose()
        with trio.fail_after(15):
            assert (await request(port, "GET", "/refuse"))[0] == 409
        await idle[1].aclose()
        nursery.cancel_scope.cancel()
