"""Bookies served by this process, by address, so an in-process ledger client can skip the wire.

In `ledgerwire standalone` the broker's ledger client and its bookies share one process. Going
through loopback TCP costs an encode, two socket copies and a decode for every entry each way;
a client that opts in (BookKeeper(..., local_bookies=True)) instead hands the request object
to the serving bookie's `answer()` — the same code that answers the wire, so fencing, LAC and
error statuses are identical. An address is registered only while its server is accepting, so
a stopped bookie falls back to TCP (and fails there like any unreachable bookie).

This module must never hold a bookie that is not serving, nor be used across processes.
"""

from __future__ import annotations

from typing import Protocol

from ledger_backend.bookie.protocol import Message


class AnswersRequests(Protocol):
    async def answer(self, request: Message) -> Message: ...


_serving: dict[str, AnswersRequests] = {}


def register(address: str, server: AnswersRequests) -> None:
    _serving[address] = server


def unregister(address: str, server: AnswersRequests) -> None:
    if _serving.get(address) is server:
        del _serving[address]


def lookup(address: str) -> AnswersRequests | None:
    return _serving.get(address)
