"""gateway/cluster/peer_client.py's connection pool, against a stand-in peer that can hold an answer
back: a slow request does not hold up the next one to the same broker, a caller that gave up
waiting for a free connection takes nobody's connection down, and a request that timed out on
the wire closes only its own connection.

(The old client sent one request at a time per peer under one lock whose wait counted against
the request's timeout, and dropped the shared connection whenever any caller timed out.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio

from gateway.cluster.peer_client import PeerClient
from protocols.kafka.codec import decode_request, encode_response
from protocols.kafka.errors import RequestTimedOutError
from protocols.kafka.framing import FrameReader

API_VERSIONS = 18


@dataclass
class StandInPeer:
    """Answers ApiVersions v0; after `hold_next` is set, the next request's answer waits for
    `release` (`holding` tells that it arrived)."""

    port: int = 0
    connections: int = 0
    requests: int = 0
    hold_next: bool = False
    holding: trio.Event = field(default_factory=trio.Event)  # a request is held back
    release: trio.Event = field(default_factory=trio.Event)

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        reader = FrameReader()
        try:
            async with stream:
                while data := await stream.receive_some(65536):
                    for frame in reader.feed(data):
                        header, _ = decode_request(frame)
                        self.requests += 1
                        if self.hold_next:
                            self.hold_next = False
                            self.holding.set()
                            await self.release.wait()
                        await stream.send_all(encode_response(
                            header, {"error_code": 0, "api_keys": []}))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


@asynccontextmanager
async def stand_in_peer() -> AsyncIterator[StandInPeer]:
    peer = StandInPeer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, peer.serve, 0,
                                                host="127.0.0.1"))
        peer.port = listeners[0].socket.getsockname()[1]
        yield peer
        peer.release.set()
        nursery.cancel_scope.cancel()


async def _ask(peers: PeerClient, peer: StandInPeer) -> int:
    answer = await peers.request("127.0.0.1", peer.port, API_VERSIONS, 0, {})
    return int(answer["error_code"])


async def test_a_slow_request_does_not_hold_up_the_next_one() -> None:
    async with stand_in_peer() as peer:
        peers = PeerClient("test", timeout_s=3.0)
        try:
            assert await _ask(peers, peer) == 0  # one idle connection
            slow_done = trio.Event()

            async def slow() -> None:
                assert await _ask(peers, peer) == 0
                slow_done.set()

            async with trio.open_nursery() as nursery:
                peer.hold_next = True
                nursery.start_soon(slow)
                await peer.holding.wait()
                with trio.fail_after(1.0):  # not behind the held one
                    assert await _ask(peers, peer) == 0
                assert not slow_done.is_set()
                peer.release.set()
            assert slow_done.is_set()
            assert peer.connections == 2
            for _ in range(5):  # both idle now, reused
                assert await _ask(peers, peer) == 0
            assert peer.connections == 2
        finally:
            await peers.aclose()


async def test_giving_up_on_a_full_pool_takes_no_connection_down() -> None:
    async with stand_in_peer() as peer:
        peers = PeerClient("test", timeout_s=2.0, max_connections=1)
        try:
            results: list[int] = []

            async def held() -> None:
                results.append(await _ask(peers, peer))

            async with trio.open_nursery() as nursery:
                peer.hold_next = True
                nursery.start_soon(held)
                await peer.holding.wait()
                peers.timeout_s = 0.3  # later callers give up sooner than the held one
                with pytest.raises(RequestTimedOutError, match="busy"):
                    await _ask(peers, peer)  # waited for the only connection, gave up
                peer.release.set()
            assert results == [0]  # the held request still got its answer
            assert await _ask(peers, peer) == 0
            assert peer.connections == 1
        finally:
            await peers.aclose()


async def test_a_request_timed_out_on_the_wire_closes_only_its_connection() -> None:
    async with stand_in_peer() as peer:
        peers = PeerClient("test", timeout_s=0.5)
        try:
            other_done = trio.Event()

            async def other() -> None:
                await trio.sleep(0.2)
                assert await _ask(peers, peer) == 0
                other_done.set()

            async with trio.open_nursery() as nursery:
                peer.hold_next = True
                nursery.start_soon(other)
                with pytest.raises(RequestTimedOutError, match="did not answer"):
                    await _ask(peers, peer)
            assert other_done.is_set()
            assert await _ask(peers, peer) == 0  # on the other request's connection
            assert peer.connections == 2
        finally:
            await peers.aclose()
