"""remote_admin.fetch_inbound never hands the registered password to anyone but the remote's
admin API over a safe path: not in clear to another host, not to where a redirect points.
Real HTTP servers on loopback (threads)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trio

import gateway.replication.remote_admin as remote_admin
from gateway.replication.clusters import RemoteCluster
from gateway.replication.offset_translation import LinkView
from gateway.replication.remote_admin import AnswerTooLarge, RemoteAdminError, fetch_inbound

INBOUND = {"cluster": "west", "partitions": {"0": {
    "north": {"inbound": [[5, 7]], "scanned": 9, "unnoted": 2, "syncs": [[8, 3]]},
    "east": {"inbound": [], "scanned": 4}}}}  # as a remote from before unnoted and syncs


@contextmanager
def serving(answer: tuple[int, dict[str, str], bytes]) -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on loopback answering every GET with `answer` (status, headers, body);
    yields its URL and the headers of the requests it got."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(dict(self.headers))
            status, headers, body = answer
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving_endless(length: str | None = None) -> Iterator[str]:
    """An HTTP server on loopback answering every GET with 200 and a body that never ends
    (with `length` as its Content-Length, if given); yields its URL."""
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            try:
                while not done.is_set():
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass  # the client went away
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        done.set()
        server.shutdown()
        server.server_close()


def remote(admin_url: str) -> RemoteCluster:
    return RemoteCluster("west", "127.0.0.1:9092", admin_url=admin_url,
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                         sasl_user="repl", sasl_password="s3cret")


async def test_the_inbound_pairs_are_fetched_with_the_password_on_loopback() -> None:
    with serving((200, {"Content-Type": "application/json"},
                  json.dumps(INBOUND).encode())) as (url, seen):
        assert await fetch_inbound(remote(url), "t") == {0: {
            "north": LinkView(((5, 7),), 9, 2, ((8, 3),)), "east": LinkView((), 4, 4, ())}}
    assert [h.get("Authorization", "").startswith("Basic ") for h in seen] == [True]


async def test_the_password_never_goes_in_clear_to_another_host() -> None:
    # TEST-NET-1: nothing answers there; the refusal comes before any connection
    with pytest.raises(RemoteAdminError, match="not https"):
        await fetch_inbound(remote("http://192.0.2.1:8080"), "t")
    with pytest.raises(RemoteAdminError, match="not https"):
        await fetch_inbound(remote("http://west.example:8080"), "t")


async def test_a_redirect_is_not_followed_with_the_password() -> None:
    body = json.dumps(INBOUND).encode()
    with serving((200, {"Content-Type": "application/json"}, body)) as (elsewhere, taken), \
            serving((302, {"Location": elsewhere + "/steal"}, b"")) as (url, _):
        with pytest.raises(RemoteAdminError, match="302"):
            await fetch_inbound(remote(url), "t")
    assert taken == []  # the redirect's target got no request, so no Authorization header


async def test_a_hung_remote_does_not_hold_back_another_remotes_fetches() -> None:
    """Fetches abandoned on a remote that never answers keep their worker threads (and
    tokens) until the socket timeout; another remote's fetch must not wait for them."""
    hung = socket.socket()  # listens, takes the connections (backlog), never answers
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    south = dataclasses.replace(remote(f"http://127.0.0.1:{hung.getsockname()[1]}"),
                                name="south")
    try:
        with trio.move_on_after(0.5):  # a round ends: its fetches are abandoned, still running
            async with trio.open_nursery() as fetches:
                for i in range(12):
                    fetches.start_soon(fetch_inbound, south, f"topic-{i}")
        with serving((200, {"Content-Type": "application/json"},
                      json.dumps(INBOUND).encode())) as (url, _seen):
            with trio.fail_after(5):  # (TIMEOUT_S is 10: with shared tokens it waits that long)
                assert 0 in await fetch_inbound(remote(url), "t")
    finally:
        hung.close()


@pytest.mark.parametrize("length", [None, str(1 << 40)])
async def test_an_endless_answer_is_cut_off_at_the_cap(
        length: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever answers at the admin URL cannot make the broker hold an unbounded body: an
    endless one (announced as a terabyte, or not announced) is refused at MAX_ANSWER_BYTES.
    Without the cap the fetch reads until the server stops (the fail_after here)."""
    monkeypatch.setattr(remote_admin, "MAX_ANSWER_BYTES", 1 << 20)
    with serving_endless(length) as url:
        with trio.fail_after(30), pytest.raises(AnswerTooLarge, match="more than 1048576"):
            await fetch_inbound(remote(url), "t")
