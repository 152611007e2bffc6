"""The admin HTTP server: routing, JSON errors, keep-alive, and refusal of bad input."""

from __future__ import annotations

import pytest
import trio

from gateway.admin import http_server as admin_http
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse, Router, serve_admin_http
from tests.operations.http_support import exchange, request


def echo_router() -> Router:
    router = Router()

    async def echo(q: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"params": q.params, "body": q.json(), "x": q.arg("x")})

    async def boom(q: HttpRequest) -> HttpResponse:
        raise RuntimeError("handler bug")

    async def refuse(q: HttpRequest) -> HttpResponse:
        raise HttpError(409, "no")

    router.add("POST", "/things/{name}", echo)
    router.add("GET", "/boom", boom)
    router.add("GET", "/refuse", refuse)
    return router


@pytest.fixture
async def port():  # type: ignore[no-untyped-def]
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve_admin_http, echo_router(), "127.0.0.1", 0)
        yield bound
        nursery.cancel_scope.cancel()


async def test_routes_params_query_and_json_body(port: int) -> None:
    status, doc = await request(port, "POST", "/things/a%20b?x=1", {"k": [1, 2]})
    assert status == 200
    assert doc == {"params": {"name": "a b"}, "body": {"k": [1, 2]}, "x": "1"}


async def test_errors_are_json_with_the_right_status(port: int) -> None:
    assert (await request(port, "GET", "/nowhere"))[0] == 404
    assert (await request(port, "GET", "/things/a"))[0] == 405
    assert await request(port, "GET", "/refuse") == (409, {"error": "no"})
    status, doc = await request(port, "GET", "/boom")
    assert status == 500 and "handler bug" in doc["error"]
    status, doc = await request(port, "POST", "/things/a", None)
    assert status == 200
    raw = b"POST /things/a HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{x]"
    assert b" 400 " in (await exchange(port, raw)).split(b"\r\n")[0]


async def test_keep_alive_serves_several_requests_on_one_connection(port: int) -> None:
    one = b"POST /things/a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    last = b"POST /things/b HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    answer = await exchange(port, one + one + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.count(b"Connection: keep-alive") == 2


@pytest.mark.parametrize(("raw", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /x HTTP/2.0\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"POST /things/a HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
    (b"POST /things/a HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
    (b"POST /things/a HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"POST /things/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"GET /x HTTP/1.1\r\nX-Big: " + b"a" * (admin_http.MAX_HEAD_BYTES + 10), 431),
])
async def test_bad_requests_get_an_error_and_the_connection_closes(
        port: int, raw: bytes, status: int) -> None:
    answer = await exchange(port, raw)
    assert answer.split(b"\r\n")[0].startswith(b"HTTP/1.1 %d " % status)


async def test_a_slow_client_is_disconnected(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_http, "REQUEST_TIMEOUT_S", 0.2)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /boom HTTP/1.1\r\n")  # never finishes the head
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b""


async def test_server_survives_a_client_that_vanishes_mid_body(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"POST /things/a HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    await stream.aclose()
    assert (await request(port, "GET", "/refuse"))[0] == 409
