"""A broker of a cluster that sees a topic leave the catalogue (deleted through another broker)
collects what it keeps for it, as the deleting broker does: its deletion hooks run once, with
the deleted topic.  Here the hook is the group coordinator's: the groups this broker
coordinates lose their offsets of the topic, as Kafka's coordinators do on every broker.
Before, only the broker that deleted the topic collected anything.

A topic deleted and created again between two refreshes keeps its name but not its id: the
broker handles it as a deletion followed by a creation (the old topic's hooks run, its logs
here close), on the embedded store and on ZooKeeper."""

from __future__ import annotations

import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.process.cluster_broker import refresh_topics
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import MetadataStore, open_store
from protocols.kafka.group_coordinator import CommittedOffset, CoordinatorConfig, GroupCoordinator
from protocols.kafka.record_batch import build_batch
from tests.support.store_fixtures import store, zk_server

__all__ = ["store", "zk_server"]  # the fixtures (tests/support/store_fixtures.py)

SYSTEM = ManagedLedgerConfig(max_entries_per_ledger=4)


async def test_a_topic_deleted_elsewhere_runs_this_brokers_hooks_once() -> None:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            here = TopicService(store, ManagedLedgerFactory(store, bk))
            elsewhere = TopicService(store, ManagedLedgerFactory(store, bk))
            coordinator = GroupCoordinator(
                LedgerOffsetStore(ManagedLedgerFactory(store, bk), SYSTEM), CoordinatorConfig())
            seen: list[TopicInfo] = []

            async def forget(info: TopicInfo) -> None:
                seen.append(info)
                await coordinator.forget_topic(info.name)

            here.deletion_hooks.append(forget)
            async with trio.open_nursery() as nursery:
                await nursery.start(coordinator.run)
                for name in ("orders", "payments"):
                    await elsewhere.create_topic(name, 1)
                await refresh_topics(store, here)
                assert set(here.topics()) == {"orders", "payments"}
                await coordinator.commit_offsets(
                    group_id="g", member_id="", generation_id=-1,
                    offsets={(t, 0): CommittedOffset(5) for t in ("orders", "payments")})
                deleted = elsewhere.topics()["orders"]

                await elsewhere.delete_topic("orders")
                await refresh_topics(store, here)
                await refresh_topics(store, here)  # once: it is no longer known here

                assert seen == [deleted]
                assert set(coordinator.offsets["g"]) == {("payments", 0)}
                nursery.cancel_scope.cancel()
            await here.close()
            await elsewhere.close()
    finally:
        await store.close()


async def test_a_topic_deleted_and_created_again_between_refreshes_is_a_deletion(
        store: MetadataStore) -> None:
    """Another broker deletes "orders" and creates it again before this broker's refresh: the
    name never leaves the catalogue here, but the id changed.  The old topic's hooks run once
    (its committed offsets go), and the old topic's open log here is closed and not handed
    out for the new one.  Before, nothing ran and the new topic's writes here went to the old
    topic's log."""
    async with MemoryBookKeeper(store) as bk:
        here = TopicService(store, ManagedLedgerFactory(store, bk))
        elsewhere = TopicService(store, ManagedLedgerFactory(store, bk))
        seen: list[TopicInfo] = []

        async def note(info: TopicInfo) -> None:
            seen.append(info)

        here.deletion_hooks.append(note)
        await elsewhere.create_topic("orders", 1)
        await refresh_topics(store, here)
        old = here.topics()["orders"]
        old_log = await here.partition("orders", 0)
        await old_log.append(build_batch([(b"k", b"old")], timestamp_ms=1))

        await elsewhere.delete_topic("orders")
        await elsewhere.create_topic("orders", 1)
        new = elsewhere.topics()["orders"]
        await refresh_topics(store, here)
        await refresh_topics(store, here)  # once

        assert [info.topic_id for info in seen] == [old.topic_id]
        assert here.topics()["orders"].topic_id == new.topic_id
        assert old_log.closed
        new_log = await here.partition("orders", 0)
        assert new_log is not old_log and new_log.high_watermark == 0

        # a request's refresh that sees the change first does not hide it from the follower
        await elsewhere.delete_topic("orders")
        await elsewhere.create_topic("orders", 1)
        await here.refresh_topic("orders")
        assert here.open_log("orders", 0) is None  # the old topic's log left at once
        await refresh_topics(store, here)
        assert [info.topic_id for info in seen] == [old.topic_id, new.topic_id]
        assert new_log.closed
        await here.close()
        await elsewhere.close()
