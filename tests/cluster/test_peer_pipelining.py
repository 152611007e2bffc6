"""gateway/cluster/peer_client.py's PeerConnection: several requests in flight on one
connection, answers taken oldest first and matched by correlation id (the replicator's produce
pipeline rests on this)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from gateway.cluster.peer_client import PeerClient
from protocols.kafka.codec import RequestHeader, decode_request, encode_response
from protocols.kafka.framing import FrameReader

API_VERSIONS = 18


@asynccontextmanager
async def batching_peer(batch: int, swap: bool = False) -> AsyncIterator[int]:
    """A peer that answers nothing until `batch` requests arrived, then all of them in order
    (with `swap`, the first two answers change places)."""

    async def serve(stream: trio.SocketStream) -> None:
        reader = FrameReader()
        headers: list[RequestHeader] = []
        try:
            async with stream:
                while data := await stream.receive_some(65536):
                    headers += [decode_request(frame)[0] for frame in reader.feed(data)]
                    if len(headers) >= batch:
                        if swap:
                            headers[0], headers[1] = headers[1], headers[0]
                        for header in headers:
                            await stream.send_all(encode_response(
                                header, {"error_code": 0, "api_keys": []}))
                        headers = []
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_five_requests_in_flight_answered_in_order() -> None:
    async with batching_peer(5) as port:
        peers = PeerClient("test", timeout_s=10.0)
        try:
            connection = await peers.open_connection("127.0.0.1", port)
            sent = [await connection.send(API_VERSIONS, 0, {}) for _ in range(5)]
            assert connection.in_flight == 5  # the peer answers only once all five are in
            with trio.fail_after(10):
                got = [await connection.receive() for _ in range(5)]
            assert [cid for cid, _ in got] == sent
            assert all(answer["error_code"] == 0 for _, answer in got)
            assert connection.in_flight == 0
            with pytest.raises(EOFError):  # nothing in flight: nothing to wait for
                await connection.receive()
        finally:
            await peers.aclose()


async def test_an_answer_out_of_order_breaks_the_connection() -> None:
    async with batching_peer(2, swap=True) as port:
        peers = PeerClient("test", timeout_s=10.0)
        try:
            connection = await peers.open_connection("127.0.0.1", port)
            await connection.send(API_VERSIONS, 0, {})
            await connection.send(API_VERSIONS, 0, {})
            with trio.fail_after(10), pytest.raises(EOFError, match="where 1 was due"):
                await connection.receive()
        finally:
            await peers.aclose()
