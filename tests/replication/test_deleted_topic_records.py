"""A deleted topic leaves nothing of replication's behind: its checkpoints, the configs agreed
with each remote and its paused mark go from the metadata store with it (the embedded store
and ZooKeeper alike), and the service's per-topic memory goes at once.  Records a deletion
left (a crash, or code from before) are collected when the service starts; a live topic's
are kept.  Before, every one of them stayed for good: a client suite creating and deleting
thousands of topics grew the store and the maps without bound."""

from __future__ import annotations

import uuid

import pytest
import trio

from gateway.config.settings import ReplicationConfig
from gateway.replication.checkpoints import (
    REPLICATION_PATH,
    Checkpoint,
    CheckpointLost,
    CheckpointStore,
    checkpoint_path,
)
from gateway.replication.clusters import RemoteCluster
from gateway.replication.deleted_topics import collect_topic
from gateway.replication.paused_topics import paused_topics, write_paused
from gateway.replication.remote import RemoteKafka
from gateway.replication.service import ReplicationService
from gateway.replication.topic_configs import agreed_path, read_agreed, save_agreed
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import MetadataStore
from protocols.kafka.record_batch import build_batch
from tests.support.metadata_tree import every_path
from tests.support.store_fixtures import store, zk_server

__all__ = ["store", "zk_server"]  # the fixtures (tests/support/store_fixtures.py)

TOPIC = "acme.geo.orders"  # in namespace acme/geo, replicated to west and north
KEPT = "acme.geo.kept"


async def leave_replication_records(store: MetadataStore, topic: str, topic_id: str, *,
                                    as_left: bool = False) -> None:
    """What replicators to west and north and the config follower leave for a topic
    (`as_left`: written as they were left, for a topic that has no node; a replicator's claim
    of a topic that is gone takes its node back)."""
    for remote in ("west", "north"):
        for partition in (0, 1):
            if as_left:
                await store.create(checkpoint_path(remote, topic, partition),
                                   Checkpoint(10, 12, topic_id=topic_id).to_bytes(),
                                   make_parents=True)
                continue
            checkpoint = CheckpointStore(store, remote, topic, partition)
            claimed = await checkpoint.claim(topic_id)
            claimed.source_next, claimed.remote_next = 10, 12
            await checkpoint.save(claimed)
        await save_agreed(store, remote, topic, {"retention.ms": "1000"})
    await write_paused(store, topic, True)


def memory_keys(service: ReplicationService) -> set[str]:
    """The topics named by any key of the service's per-topic memory."""
    floors = {key[1] for key, _ in service._floors}  # ((remote, topic, partition), group)
    pushed = {topic for _, topic, _ in service._pushed_elsewhere}  # (remote, topic, partition)
    pairs = [*service._agreed, *service._stuck_configs, *service._config_looks,
             *service._oversized]  # (remote, topic)
    return floors | pushed | {topic for _, topic in pairs}


async def test_a_deleted_topic_leaves_no_replication_record(store: MetadataStore) -> None:
    async with MemoryBookKeeper(store) as bk:
        topics = TopicService(store, ManagedLedgerFactory(store, bk))
        namespaces = NamespaceRegistry(store)
        await namespaces.load()
        await namespaces.create_tenant("acme")
        await namespaces.create_namespace(
            "acme/geo", {"replication_clusters": ["east", "west", "north"]})
        topics.namespaces = namespaces
        service = ReplicationService(store, topics, namespaces,
                                     ReplicationConfig(cluster_name="east"))
        west = service._remotes["west"] = RemoteKafka(RemoteCluster("west", "127.0.0.1:9"),
                                                      "test")
        before = set(await every_path(store))
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            for name in (TOPIC, KEPT):
                await topics.create_topic(name, 2)
                for partition in (0, 1):  # used: opened and written
                    plog = await topics.partition(name, partition)
                    await plog.append(build_batch([(b"k", b"v")], timestamp_ms=1))
                await leave_replication_records(store, name, str(topics.topics()[name].topic_id))
                for remote in ("west", "north"):
                    key = (remote, name)
                    service._agreed[key] = {"retention.ms": "1000"}
                    service._stuck_configs[key], service._config_looks[key] = {}, 3
                    service._oversized.add(key)
                    service._floors[((remote, name, 0), "g")] = (5, 7)
                    service._pushed_elsewhere[(remote, name, 1)] = {"g": 7}
                west._leaders[(name, 0)] = ("127.0.0.1", 9)
            assert any(TOPIC in p for p in await every_path(store))

            await topics.delete_topic(TOPIC)

            left = [p for p in await every_path(store) if TOPIC in p]
            assert left == []
            assert await paused_topics(store) == {KEPT}
            assert memory_keys(service) == {KEPT}
            assert set(west._leaders) == {(KEPT, 0)}
            # the other topic keeps everything it had
            assert await read_agreed(store, "west", KEPT) == {"retention.ms": "1000"}
            assert len([p for p in await every_path(store) if KEPT in p]) > 8

            # created again under the name: it starts afresh, and goes again as cleanly
            await topics.create_topic(TOPIC, 1)
            claimed = await CheckpointStore(store, "west", TOPIC, 0).claim(
                str(topics.topics()[TOPIC].topic_id))
            assert (claimed.source_next, claimed.remote_next) == (0, -1)
            await topics.delete_topic(TOPIC)
            await topics.delete_topic(KEPT)
            nursery.cancel_scope.cancel()
        await topics.close()
        # nothing of either topic is left (the replication roots and the parents each
        # remote's records hang from may stay: one node per remote, not per topic)
        added = set(await every_path(store)) - before
        assert {p for p in added if TOPIC in p or KEPT in p} == set()


async def test_records_a_deletion_left_are_collected_at_start(store: MetadataStore) -> None:
    """Records of topics that have no node (a deletion interrupted by a crash, or made while
    no replication service ran) go when the service starts; a live topic's stay, and so do
    the paused marks of live topics."""
    async with MemoryBookKeeper(store) as bk:
        topics = TopicService(store, ManagedLedgerFactory(store, bk))
        namespaces = NamespaceRegistry(store)
        await namespaces.load()
        topics.namespaces = namespaces
        await topics.create_topic(KEPT, 2)
        kept_id = str(topics.topics()[KEPT].topic_id)
        await leave_replication_records(store, KEPT, kept_id)
        await leave_replication_records(store, TOPIC, str(uuid.uuid4()),  # no such topic
                                        as_left=True)
        service = ReplicationService(store, topics, namespaces,
                                     ReplicationConfig(cluster_name="east"))
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            with trio.fail_after(30):  # generous: the sweep runs beside the first scan
                while True:
                    left = [p for p in await every_path(store) if TOPIC in p]
                    if not left and await paused_topics(store) == {KEPT}:
                        break
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert await store.exists(agreed_path("west", KEPT)) is not None
        for remote in ("west", "north"):
            assert sorted(await store.children(f"{REPLICATION_PATH}/{remote}/{KEPT}")) == [
                "0", "1"]
        await topics.close()


async def test_replicators_that_missed_a_deletion_put_nothing_back(
        store: MetadataStore) -> None:
    """The deletion wins over the topic's replicators elsewhere (a broker whose catalogue has
    not seen it yet): a save after the collection is a lost claim, and a claim or an agreed
    config written after it takes its node back.  Before, the claim and the config follower
    put the nodes back, and only the service's next start collected them."""
    async with MemoryBookKeeper(store) as bk:
        topics = TopicService(store, ManagedLedgerFactory(store, bk))

        async def collect(info: TopicInfo) -> None:  # the replication service's hook
            await collect_topic(store, info.name, str(info.topic_id))

        topics.deletion_hooks.append(collect)
        await topics.create_topic(TOPIC, 2)
        topic_id = str(topics.topics()[TOPIC].topic_id)
        running = CheckpointStore(store, "west", TOPIC, 0)  # a replicator elsewhere
        position = await running.claim(topic_id)
        await save_agreed(store, "west", TOPIC, {"retention.ms": "1000"}, topic_id)

        await topics.delete_topic(TOPIC)
        assert [p for p in await every_path(store) if TOPIC in p] == []

        position.source_next = 5
        with pytest.raises(CheckpointLost):
            await running.save(position)
        with pytest.raises(CheckpointLost):  # its next session's claim
            await CheckpointStore(store, "west", TOPIC, 1).claim(topic_id)
        await save_agreed(store, "north", TOPIC, {"retention.ms": "2000"}, topic_id)
        assert [p for p in await every_path(store) if TOPIC in p] == []

        # created again under the name: its own claim and configs are kept
        await topics.create_topic(TOPIC, 1)
        new_id = str(topics.topics()[TOPIC].topic_id)
        await CheckpointStore(store, "west", TOPIC, 0).claim(new_id)
        await save_agreed(store, "north", TOPIC, {"retention.ms": "3000"}, new_id)
        with pytest.raises(CheckpointLost):  # the old topic's replicator, still behind
            await CheckpointStore(store, "north", TOPIC, 0).claim(topic_id)
        assert await read_agreed(store, "north", TOPIC) == {"retention.ms": "3000"}
        assert await store.exists(checkpoint_path("west", TOPIC, 0)) is not None
        assert await store.exists(checkpoint_path("north", TOPIC, 0)) is None
        await topics.close()


class SavingBeforeDelete:
    """The store, with a replicator's save landing between the collection's read of a
    checkpoint and its delete (once)."""

    def __init__(self, store: MetadataStore, replicator: CheckpointStore,
                 position: Checkpoint) -> None:
        self._store = store
        self._replicator: CheckpointStore | None = replicator
        self._position = position

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def delete(self, path: str, version: int = -1, **kwargs: bool) -> None:
        if self._replicator is not None and path == self._replicator.path:
            replicator, self._replicator = self._replicator, None
            self._position.source_next += 1
            await replicator.save(self._position)
        await self._store.delete(path, version, **kwargs)


async def test_a_save_racing_the_collection_does_not_keep_the_checkpoint(
        store: MetadataStore) -> None:
    """A checkpoint of the deleted topic whose version moved between the collection's read
    and its delete (the replicator saved) is looked at again and removed; before, the
    collection left it to "the claimer" for good."""
    topic_id = str(uuid.uuid4())
    replicator = CheckpointStore(store, "west", TOPIC, 0)
    position = await replicator.claim()  # no topic id: the topic's node is not needed here
    position.topic_id = topic_id
    await replicator.save(position)
    racing = SavingBeforeDelete(store, replicator, position)
    assert await collect_topic(racing, TOPIC, topic_id) >= 1  # type: ignore[arg-type]
    assert racing._replicator is None  # the save did land in between
    assert [p for p in await every_path(store) if TOPIC in p] == []
    with pytest.raises(CheckpointLost):
        await replicator.save(position)
