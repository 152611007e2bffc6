"""A broker of a cluster that sees a topic leave the catalogue (deleted through another broker)
collects what it keeps for it, as the deleting broker does: its deletion hooks run once, with
the deleted topic.  Here the hook is the group coordinator's: the groups this broker
coordinates lose their offsets of the topic, as Kafka's coordinators do on every broker.
Before, only the broker that deleted the topic collected anything."""

from __future__ import annotations

import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.process.cluster_broker import refresh_topics
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset, CoordinatorConfig, GroupCoordinator

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
