"""tls_handshake (gateway/kafka/admission.py) over real loopback sockets: a connection closed
before its first byte (a peer broker's liveness probe, gateway/cluster/peer_liveness.py, four
a second per peer) is logged at DEBUG only, while a client that sent bytes and then failed
the handshake is still logged at INFO, and a real TLS client still gets its stream."""

from __future__ import annotations

import logging
import ssl

import pytest
import trio

from gateway.cluster.peer_liveness import PortState, probe_port
from gateway.kafka.admission import tls_handshake

LOGGER = "ledgerwire.kafka.listener"


async def _admit_one(server_context: ssl.SSLContext,
                     client: object) -> trio.SSLStream[trio.SocketStream] | None:
    """Accepts one connection on a loopback port, runs `client(port)` against it, and returns
    what tls_handshake made of it."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    result: list[trio.SSLStream[trio.SocketStream] | None] = []
    async with trio.open_nursery() as nursery:
        async def serve() -> None:
            stream = await listeners[0].accept()
            result.append(await tls_handshake(stream, server_context, "127.0.0.1:1"))
            if result[0] is not None:
                await result[0].send_all(b"ok")
                await result[0].aclose()

        nursery.start_soon(serve)
        await client(port)  # type: ignore[operator]
    await listeners[0].aclose()
    return result[0]


def _handshake_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


async def test_a_liveness_probe_is_logged_at_debug_only(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        caplog: pytest.LogCaptureFixture) -> None:
    async def probe(port: int) -> None:
        assert await probe_port("127.0.0.1", port) is PortState.ACCEPTS

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert await _admit_one(contexts[0], probe) is None
    records = _handshake_records(caplog)
    assert records, "the probe's connection is not logged at all"
    assert all(r.levelno == logging.DEBUG for r in records), \
        [(r.levelname, r.getMessage()) for r in records]


async def test_a_client_that_sent_bytes_and_failed_is_still_logged(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        caplog: pytest.LogCaptureFixture) -> None:
    async def half_hello(port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello's first bytes
        await stream.aclose()

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert await _admit_one(contexts[0], half_hello) is None
    assert [r.getMessage() for r in _handshake_records(caplog)
            if r.levelno == logging.INFO] == ["TLS handshake failed"]


async def test_a_tls_client_is_served(contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    received: list[bytes] = []

    async def tls_client(port: int) -> None:
        stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), contexts[1],
                                server_hostname="localhost")
        received.append(bytes(await stream.receive_some(10)))
        await stream.aclose()

    assert await _admit_one(contexts[0], tls_client) is not None
    assert received == [b"ok"]
