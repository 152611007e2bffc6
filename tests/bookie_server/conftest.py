"""Fixtures for the bookie server tests: a served MemoryBookieStorage and raw wire clients."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.server import serve_bookie
from tests.bookie_server.bookie_wire_client import Connect, RawBookieClient, ServedBookie


@pytest.fixture
async def served_bookie(nursery: trio.Nursery) -> ServedBookie:
    storage = MemoryBookieStorage()
    address = await nursery.start(serve_bookie, storage, None, "127.0.0.1", 0)
    return ServedBookie(storage, address)


@pytest.fixture
async def connect(served_bookie: ServedBookie) -> AsyncIterator[Connect]:
    clients: list[RawBookieClient] = []

    async def open_client() -> RawBookieClient:
        stream = await trio.open_tcp_stream(served_bookie.address.host, served_bookie.address.port)
        client = RawBookieClient(stream)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await trio.aclose_forcefully(client.stream)
