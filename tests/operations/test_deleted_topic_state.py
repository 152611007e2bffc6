"""A deleted topic takes what the groups and the topic service keep for it along, as Kafka's
coordinator does when a topic is deleted: every group's committed offsets of it (members or
not), its share-group delivery state (the state ledgers and what is loaded of them), and the
compaction, offload and dead-letter memory kept per partition.  A topic created again under
the name starts with none of it.  Before, all of it stayed: a created-then-deleted topic's
offsets were resumed by a new topic of its name, its share state was loaded again at every
start, and a churn of topics grew every map without bound."""

from __future__ import annotations

from pathlib import Path

import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.delivery.delivery_service import DeliveryService
from gateway.delivery.group_configs import ShareGroupConfigs
from gateway.kafka.share_groups import SHARE_STATE_LEDGER_PREFIX, ShareGroups
from gateway.process.standalone import collect_with_topics
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset, CoordinatorConfig, GroupCoordinator
from protocols.kafka.record_batch import build_batch
from tests.support.metadata_tree import every_path

TOPIC = "orders"
KEPT = "payments"
SYSTEM = ManagedLedgerConfig(max_entries_per_ledger=4)


async def test_a_deleted_topic_leaves_no_offsets_share_state_or_partition_memory(
        tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path / 'metadata'}")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory)
            coordinator = GroupCoordinator(LedgerOffsetStore(factory, SYSTEM),
                                           CoordinatorConfig())
            shares = ShareGroups(
                lambda settings_for: DeliveryService(factory, SYSTEM, settings_for=settings_for,
                                                     ledger_prefix=SHARE_STATE_LEDGER_PREFIX),
                ShareGroupConfigs(store))
            collect_with_topics(topics, coordinator, shares)
            async with trio.open_nursery() as nursery:
                await nursery.start(coordinator.run)
                for name in (TOPIC, KEPT):
                    await topics.create_topic(name, 2)
                    for p in (0, 1):  # written, consumed by a group and a share group
                        plog = await topics.partition(name, p)
                        await plog.append(build_batch([(b"k", b"v")] * 3, timestamp_ms=1))
                        await shares.delivery.acquire("sg", name, p, "m", 2, fetchable_end=3,
                                                      log_start=0, start_at=0)
                        topics.compaction.state(name, p)
                        topics.offload.state(name, p)
                        shares.dead_lettered[("sg", name, p)] = 1
                    await coordinator.commit_offsets(
                        group_id="g", member_id="", generation_id=-1,
                        offsets={(name, p): CommittedOffset(3) for p in (0, 1)})

                await topics.delete_topic(TOPIC)

                assert set(coordinator.offsets["g"]) == {(KEPT, 0), (KEPT, 1)}
                assert {t for t, _ in shares.delivery.loaded_partitions()} == {KEPT}
                assert {k[1] for k in shares.dead_lettered} == {KEPT}
                assert {t for t, _ in topics.compaction.states()} == {KEPT}
                assert {t for t, _ in topics.offload._state} == {KEPT}
                assert [n for n in await factory.list_names() if TOPIC in n] == []

                # created again: no offsets, no share state of the old topic
                await topics.create_topic(TOPIC, 2)
                assert coordinator.fetch_offsets("g", [(TOPIC, 0)]) == {}
                assert await shares.delivery.view("sg", TOPIC, 0) is None
                await topics.delete_topic(TOPIC)
                nursery.cancel_scope.cancel()
            await shares.close()
            await topics.close()

            # what is durable agrees: the offsets reload without the topic
            again = LedgerOffsetStore(factory, SYSTEM)
            reloaded = await again.load()
            assert set(reloaded["g"]) == {(KEPT, 0), (KEPT, 1)}
            await again.close()
        assert [p for p in await every_path(store) if TOPIC in p] == []
    finally:
        await store.close()
