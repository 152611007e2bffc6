"""The bridge's Trio thread (spark_bridge/trio_thread.py): resources are entered in the loop
and their error reaches the caller; calls are bounded; stop() ends the thread."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.lowlevel

from spark_bridge.trio_thread import TrioThread


def test_resources_calls_background_tasks_and_stop() -> None:
    closed: list[str] = []

    @asynccontextmanager
    async def resources() -> AsyncIterator[str]:
        try:
            yield "store"
        finally:
            closed.append("store")

    loop = TrioThread("test-trio-thread", call_timeout_s=0.5)
    assert loop.start(resources) == "store" and loop.running

    async def double(x: int) -> int:
        await trio.lowlevel.checkpoint()
        return 2 * x

    assert loop.call(double, 21) == 42
    with pytest.raises(trio.TooSlowError):
        loop.call(trio.sleep, 30)  # bounded by call_timeout_s
    started = threading.Event()

    async def background() -> None:
        started.set()
        await trio.sleep_forever()  # cancelled by stop()

    loop.start_soon(background)
    assert started.wait(30)
    loop.stop()
    assert closed == ["store"] and not loop.running
    assert not any(t.name == "test-trio-thread" for t in threading.enumerate())
    loop.run_sync(print)  # after stop: nothing, no error


def test_an_error_entering_resources_is_raised_by_start() -> None:
    @asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise ConnectionRefusedError("no metadata here")
        yield  # pragma: no cover

    loop = TrioThread("test-trio-thread-broken", call_timeout_s=1)
    with pytest.raises(ConnectionRefusedError, match="no metadata here"):
        loop.start(broken)
    assert not loop.running
    assert not any(t.name == "test-trio-thread-broken" for t in threading.enumerate())
