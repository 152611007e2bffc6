"""Fixtures for partition log tests: an in-memory metadata store, MemoryBookKeeper, factories."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await open_store("memory:")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def bookkeeper(store: MetadataStore) -> AsyncIterator[MemoryBookKeeper]:
    async with MemoryBookKeeper(store) as bk:
        yield bk


class Broker:
    """One 'broker': a factory and topic service over the shared store and bookkeeper."""

    def __init__(self, store: MetadataStore, bk: MemoryBookKeeper, config: TopicServiceConfig):
        self.factory = ManagedLedgerFactory(store, bk)
        self.topics = TopicService(store, self.factory, config)


@pytest.fixture
def make_broker(store: MetadataStore, bookkeeper: MemoryBookKeeper):  # type: ignore[no-untyped-def]
    made: list[Broker] = []

    async def make(**overrides: object) -> Broker:
        config = TopicServiceConfig(**overrides)  # type: ignore[arg-type]
        broker = Broker(store, bookkeeper, config)
        await broker.topics.load()
        made.append(broker)
        return broker

    return make
