"""What the replication service's scan costs: a scan with nothing changed since the last one
looks up no topic's policies (with 10,000 topics a lookup each every 2 s was most of an idle
standalone's CPU), a changed catalogue costs a lookup per topic created or changed, and what
replicates is still found as before: a topic created in a replicated namespace, a deleted
one, a namespace that gains or loses its replication clusters.

A real namespace registry on the embedded store; the topic catalogue is a small stand-in that
hands out snapshots as the topic service does (a new one after each change).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from gateway.config.settings import ReplicationConfig
from gateway.replication.service import ReplicationService
from gateway.topics.namespaces import NamespacePolicies, NamespaceRegistry
from gateway.topics.topic_node import TopicInfo
from ledger_backend.metadata import open_store

TOPICS = 2_000


class Catalogue:
    """The topic service's listing: a read-only snapshot, made again after each change."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicInfo] = {}
        self._snapshot: Mapping[str, TopicInfo] | None = None

    def put(self, name: str, partitions: int) -> None:
        self._topics[name] = TopicInfo(name, uuid.uuid4(), partitions)
        self._snapshot = None

    def drop(self, name: str) -> None:
        del self._topics[name]
        self._snapshot = None

    def topics(self) -> Mapping[str, TopicInfo]:
        if self._snapshot is None:
            self._snapshot = MappingProxyType(dict(self._topics))
        return self._snapshot

    def is_internal(self, topic: str) -> bool:
        return False


class CountingRegistry(NamespaceRegistry):
    lookups = 0

    def topic_policies(self, topic: str) -> NamespacePolicies:
        self.lookups += 1
        return super().topic_policies(topic)


async def test_an_unchanged_scan_looks_up_no_topic(tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path}")
    try:
        namespaces = CountingRegistry(store)
        await namespaces.load()
        catalogue = Catalogue()
        for i in range(TOPICS):
            catalogue.put(f"t{i:05d}", 10)
        service = ReplicationService(store, catalogue, namespaces,
                                     ReplicationConfig(cluster_name="east"))

        def scan() -> tuple[dict[str, tuple[set[str], int]], int]:
            before = namespaces.lookups
            found = service._replicated()
            return found, namespaces.lookups - before

        assert scan() == ({}, TOPICS)  # the first scan looks at every topic
        for _ in range(3):
            assert scan() == ({}, 0)  # nothing changed: nothing looked up

        await namespaces.create_tenant("acme")
        await namespaces.create_namespace("acme/geo", {"replication_clusters": ["east", "west"]})
        catalogue.put("acme.geo.orders", 3)
        assert scan() == ({"acme.geo.orders": ({"west"}, 3)}, TOPICS + 1)  # policies changed
        assert scan()[1] == 0

        catalogue.put("acme.geo.audit", 2)  # a topic created in a replicated namespace
        found, looked = scan()
        assert (list(found), looked) == (["acme.geo.audit", "acme.geo.orders"], 1)
        catalogue.put("acme.geo.audit", 4)  # partitions added
        assert scan() == ({"acme.geo.audit": ({"west"}, 4), "acme.geo.orders": ({"west"}, 3)},
                          1)
        catalogue.drop("acme.geo.orders")  # deleted
        assert scan() == ({"acme.geo.audit": ({"west"}, 4)}, 0)

        await namespaces.set_policies("acme/geo", {"replication_clusters": ["east", "north"]})
        assert scan()[0] == {"acme.geo.audit": ({"north"}, 4)}
        await namespaces.set_policies("acme/geo", {"replication_clusters": None})
        assert scan()[0] == {}
        assert service.wanted() == []

        await namespaces.set_policies("public/default", {"replication_clusters": ["east", "west"]})
        found, looked = scan()
        assert (len(found), looked) == (TOPICS, TOPICS + 1)  # not acme.geo.audit
        assert len(service.wanted()) == TOPICS * 10
        assert scan()[1] == 0
    finally:
        await store.close()


async def test_a_change_seen_by_the_follower_is_scanned(tmp_path: Path) -> None:
    """A policy changed by another process (the registry's re-read) counts as a change."""
    store = await open_store(f"embedded:{tmp_path}")
    try:
        here, elsewhere = NamespaceRegistry(store), NamespaceRegistry(store)
        await here.load()
        await elsewhere.load()
        catalogue = Catalogue()
        catalogue.put("orders", 2)
        service = ReplicationService(store, catalogue, here,
                                     ReplicationConfig(cluster_name="east"))
        assert service._replicated() == {}
        await elsewhere.set_policies("public/default", {"replication_clusters": ["west"]})
        assert service._replicated() == {}  # not yet re-read here
        assert await here.reload()
        assert service._replicated() == {"orders": ({"west"}, 2)}
    finally:
        await store.close()
