"""A new topic's partitions open in one metadata write each (issue 16): creating the topic
also creates the parent of its partition state nodes (topic_store.TopicStore.create), so
a first open writes only its own managed ledger, first ledger and state node, in one multi.
Before, the first partition of a topic to open checked and created that parent (a write) while
its siblings queued behind it."""

from __future__ import annotations

import trio

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from gateway.topics.topic_store import PARTITION_STATE_PATH
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import MetadataStore
from tests.managed_ledger.test_managed_ledger_first_open import CountingStore


async def open_all(topics: TopicService, name: str, partitions: int) -> None:
    async with trio.open_nursery() as nursery:
        for p in range(partitions):
            nursery.start_soon(topics.partition, name, p)


async def test_a_new_topics_partitions_open_in_one_write_each(store: MetadataStore) -> None:
    counted = CountingStore(store)
    async with MemoryBookKeeper(store) as bk:  # (its ledger ids: uncounted next_id calls)
        topics = TopicService(counted, ManagedLedgerFactory(counted, bk),
                              TopicServiceConfig())
        await topics.load()
        await topics.create_topic("warm-up", 1)
        await open_all(topics, "warm-up", 1)  # the managed ledgers' root
        await topics.create_topic("fresh", 4)
        counted.writes.clear()
        await open_all(topics, "fresh", 4)
        assert len(counted.writes) == 4 and all(w.startswith("multi") for w in counted.writes), \
            counted.writes  # was: a create of the topic's state parent too
        assert len(await store.children(f"{PARTITION_STATE_PATH}/fresh")) == 4


async def test_a_state_parent_left_behind_does_not_stop_a_create(store: MetadataStore) -> None:
    await store.create(f"{PARTITION_STATE_PATH}/again", b"", make_parents=True)
    async with MemoryBookKeeper(store) as bk:
        topics = TopicService(store, ManagedLedgerFactory(store, bk), TopicServiceConfig())
        await topics.load()
        await topics.create_topic("again", 2)
        await open_all(topics, "again", 2)
        assert sorted(await store.children(f"{PARTITION_STATE_PATH}/again")) == ["0", "1"]
