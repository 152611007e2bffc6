"""A Trio loop on a daemon thread, for the bridge's blocking callers.

Spark calls the data source from plain threads, and its `read` methods are generators, which
cannot live inside `trio.run`; the ledger client and the offload reader are Trio code. A
`TrioThread` runs one loop on a daemon thread: `start(resources)` enters an async context
manager there (a metadata store and a ledger client, say) and keeps it open, with a nursery
for background tasks, until `stop()`; `call(fn, *args)` runs a coroutine function in the loop
and blocks for its result, bounded by `call_timeout_s`; `start_soon` starts a background task;
`run_sync` runs a plain function in the loop. Used by ledger_access.py and
offloaded_ledgers.py.

This module must never swallow an error of `resources` (start() raises it in the caller) and
never leave its thread running after `stop()` returns (it joins, bounded).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import trio

T = TypeVar("T")


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield None


class TrioThread:
    def __init__(self, name: str, call_timeout_s: float) -> None:
        self.name = name
        self.call_timeout_s = call_timeout_s
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._token is not None

    def start(self, resources: Callable[[], AbstractAsyncContextManager[T]] | None = None
              ) -> T:  # fmt: skip
        """Start the loop and enter `resources()` in it; its value, or its error raised here."""
        ready = threading.Event()
        entered: list[Any] = []
        enter: Callable[[], AbstractAsyncContextManager[Any]] = \
            resources if resources is not None else _nothing  # fmt: skip

        async def main() -> None:
            async with enter() as value, trio.open_nursery() as nursery:
                entered.append(value)
                self._nursery, self._stop = nursery, trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
                self._error = exc
            finally:
                ready.set()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        if self._token is None or not entered:
            self._join()
            raise self._error or RuntimeError(f"{self.name}: the Trio loop did not start")
        return entered[0]  # type: ignore[no-any-return]

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`await fn(*args)` in the loop (TooSlowError after call_timeout_s)."""
        async def bounded() -> T:
            with trio.fail_after(self.call_timeout_s):
                return await fn(*args)

        return trio.from_thread.run(bounded, trio_token=self._token)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """A background task in the loop's nursery (cancelled by stop())."""
        assert self._nursery is not None
        trio.from_thread.run_sync(self._nursery.start_soon, fn, *args, trio_token=self._token)

    def run_sync(self, fn: Callable[..., Any], *args: Any) -> None:
        """`fn(*args)` in the loop; nothing if the loop has already stopped."""
        if self._token is None:
            return
        try:
            trio.from_thread.run_sync(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            pass

    def stop(self) -> None:
        if self._stop is not None:
            self.run_sync(self._stop.set)
        self._token = None
        self._join()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None


__all__ = ["TrioThread"]
