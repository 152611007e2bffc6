"""Which group offsets the replication service pushes: a topic replicated between two clusters
gets its groups' translated offsets committed there; one among three or more clusters gets none
when the remote's admin API cannot serve its inbound pairs (without them a third cluster's
records there could be skipped; tests/replication/test_geo_three.py pushes them for real).

The service runs on a real embedded metadata store; its replicators, remotes, namespaces and
group coordinator are small stand-ins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import trio

from gateway.config.settings import ReplicationConfig
from gateway.replication.checkpoints import Checkpoint
from gateway.replication.clusters import RemoteCluster
from gateway.replication.service import ReplicationService, _Running
from ledger_backend.metadata import open_store


@dataclass
class Policies:
    replication_clusters: list[str]


@dataclass
class Namespaces:
    clusters: dict[str, list[str]]

    def topic_policies(self, topic: str) -> Policies:
        return Policies(self.clusters[topic])


@dataclass
class Offset:
    offset: int
    metadata: str = ""


@dataclass
class Coordinator:
    offsets: dict[str, dict[tuple[str, int], Offset]]


@dataclass
class Replicator:
    checkpoint: Checkpoint


@dataclass
class Remote:
    cluster: RemoteCluster = RemoteCluster("west", "127.0.0.1:9")  # no admin URL registered
    commits: list[tuple[str, str, dict[int, int]]] = field(default_factory=list)

    async def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]
                             ) -> dict[int, int]:
        self.commits.append((group, topic, dict(offsets)))
        return {p: 0 for p in offsets}


async def test_offsets_go_to_the_remote_of_two_clusters_only(tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path}")
    try:
        namespaces = Namespaces({"pair": ["east", "west"], "trio": ["east", "west", "north"]})
        coordinator = Coordinator({"g": {("pair", 0): Offset(25), ("trio", 0): Offset(25)}})
        service = ReplicationService(store, object(), namespaces,  # type: ignore[arg-type]
                                     ReplicationConfig(cluster_name="east"), coordinator)
        remote = Remote()
        service._remotes["west"] = remote  # type: ignore[assignment]
        for topic in ("pair", "trio"):
            service._running[("west", topic, 0)] = _Running(
                Replicator(Checkpoint(syncs=[(10, 4), (20, 15)])),  # type: ignore[arg-type]
                trio.CancelScope())
        await service.push_offsets()
        assert remote.commits == [("g", "pair", {0: 15})]
    finally:
        await store.close()
