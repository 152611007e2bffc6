"""The caller's scheme and address that a `standalone --workers` supervisor forwards to a
worker's admin socket are believed on a unix socket only (no client address), never from a
TCP caller, who could otherwise pose as any host to ACL host rules."""

from __future__ import annotations

from starlette.requests import Request

from gateway.admin.app import FORWARDED_HEADER, _scheme_and_client


def request(client: tuple[str, int] | None, forwarded: str | None) -> Request:
    headers = [] if forwarded is None else [(FORWARDED_HEADER.encode(), forwarded.encode())]
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": b"",
                    "headers": headers, "client": client, "scheme": "http",
                    "server": None})


def test_a_unix_socket_caller_is_the_forwarded_one() -> None:
    assert _scheme_and_client(request(None, "https 10.0.0.5")) == ("https", "10.0.0.5")
    assert _scheme_and_client(request(None, None)) == ("http", "")
    assert _scheme_and_client(request(None, "gopher 10.0.0.5")) == ("http", "")


def test_a_tcp_caller_cannot_forward_another_address() -> None:
    assert _scheme_and_client(request(("192.0.2.7", 5000), "https 127.0.0.1")) == \
        ("http", "192.0.2.7")
