"""Fixtures for managed ledger tests: an in-memory metadata store and MemoryBookKeeper."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import MetadataStore, open_store
from tests.managed_ledger.ml_test_support import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await open_store("memory:")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def bk(store: MetadataStore) -> AsyncIterator[MemoryBookKeeper]:
    async with MemoryBookKeeper(store) as client:
        yield client


@pytest.fixture
def factory(store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock) -> ManagedLedgerFactory:
    return ManagedLedgerFactory(store, bk, clock=clock)
