"""Wrappers used by the managed ledger tests to observe and delay the ledger client / store."""

from __future__ import annotations

from typing import Any

import trio


class FakeClock:
    """Wall clock for ledger ages and retention that tests move by hand."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SpyBookKeeper:
    """Delegates to a real (memory) BookKeeper, counting recovery opens; create_ledger can be
    held at a gate to stretch a rollover."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.recovery_opens: list[int] = []
        self.created: list[int] = []
        self.create_gate: trio.Event | None = None
        self.create_started = trio.Event()

    async def create_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.create_started.set()
        if self.create_gate is not None:
            await self.create_gate.wait()
        handle = await self._inner.create_ledger(*args, **kwargs)
        self.created.append(handle.ledger_id)
        return handle

    async def prepare_ledger(self, *args: Any, **kwargs: Any) -> Any:
        self.create_started.set()  # (a new owner's next ledger is prepared, not created)
        return await self._inner.prepare_ledger(*args, **kwargs)

    def adopt_ledger(self, prepared: Any) -> Any:
        handle = self._inner.adopt_ledger(prepared)
        self.created.append(handle.ledger_id)
        return handle

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> Any:
        if recovery:
            self.recovery_opens.append(ledger_id)
        return await self._inner.open_ledger(ledger_id, recovery=recovery)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._inner.delete_ledger(ledger_id)

    async def list_ledgers(self) -> list[int]:
        return list(await self._inner.list_ledgers())


class GatedGetStore:
    """A metadata store proxy whose get() of one path waits until `expected` callers got there,
    so that concurrent openers all read the same version before any of them writes."""

    def __init__(self, inner: Any, path: str, expected: int) -> None:
        self._inner = inner
        self._path = path
        self._expected = expected
        self._arrived = 0
        self._all_here = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, path: str) -> Any:
        result = await self._inner.get(path)
        if path == self._path and not self._all_here.is_set():
            self._arrived += 1
            if self._arrived >= self._expected:
                self._all_here.set()
            await self._all_here.wait()
        return result
