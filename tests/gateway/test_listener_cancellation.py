"""A listener cancelled while it starts (a broker whose start-up failed elsewhere: another port
was busy, a store was down) closes its listening sockets: none is left open for the garbage
collector to find (an unraisable ResourceWarning in whichever later test collects it)."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gateway.kafka.broker import KafkaBrokerConfig
from gateway.kafka.listener import serve_kafka
from gateway.rocketmq.listener import _serve_remoting
from protocols.rocketmq.codec import RemotingCommand


async def _cancelled_when_bound(serve: Callable[[Callable[[int], None]], Awaitable[Any]]) -> None:
    """Run `serve(on_bound)`, cancelling it the moment its listeners are bound."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with trio.open_nursery() as nursery:
            bound: list[int] = []

            def on_bound(port: int) -> None:
                bound.append(port)
                nursery.cancel_scope.cancel()

            nursery.start_soon(serve, on_bound)
        gc.collect()
    assert bound, "the listener never bound"
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_a_remoting_listener_cancelled_while_starting_closes_its_sockets() -> None:
    async def never(conn: Any, request: RemotingCommand) -> RemotingCommand:
        raise AssertionError("no request is served")

    await _cancelled_when_bound(lambda on_bound: _serve_remoting(
        "test", never, "0.0.0.0", 0, max_frame_bytes=1 << 20, max_header_bytes=1 << 16,
        on_bound=on_bound))


class _BoundOnly:
    """As much of a KafkaBroker as serve_kafka touches before it serves a connection."""

    def __init__(self, on_bound: Callable[[int], None]) -> None:
        self.listener_bound = on_bound
        self.config = KafkaBrokerConfig()


async def test_a_kafka_listener_cancelled_while_starting_closes_its_sockets() -> None:
    await _cancelled_when_bound(
        lambda on_bound: serve_kafka(_BoundOnly(on_bound), "0.0.0.0", 0))  # type: ignore[arg-type]
