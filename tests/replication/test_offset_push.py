"""Which group offsets the replication service pushes: a topic replicated between two clusters
gets its groups' translated offsets committed there; one among three or more clusters gets none
when the remote's admin API cannot serve its inbound pairs (without them a third cluster's
records there could be skipped; tests/replication/test_geo_three.py pushes them for real),
and a remote whose admin API hangs holds back neither the round nor the other remotes.

The service runs on a real embedded metadata store; its replicators, remotes, namespaces and
group coordinator are small stand-ins.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

import gateway.replication.offset_push as offset_push
import gateway.replication.remote_admin as remote_admin
from gateway.config.settings import ReplicationConfig
from gateway.replication.checkpoints import Checkpoint
from gateway.replication.clusters import RemoteCluster
from gateway.replication.service import ReplicationService, _Running
from ledger_backend.metadata import open_store
from tests.replication.test_remote_admin import serving, serving_endless


@dataclass
class Policies:
    replication_clusters: list[str]


@dataclass
class Namespaces:
    clusters: dict[str, list[str]]

    def topic_policies(self, topic: str) -> Policies:
        return Policies(self.clusters[topic])

    @property
    def version(self) -> int:  # changes with the clusters, as the registry's does
        return hash(json.dumps(self.clusters, sort_keys=True))


@dataclass
class TopicInfo:
    partitions: int


@dataclass
class Topics:
    """The topic service's listing, as the service's scan reads it."""
    listed: dict[str, TopicInfo]

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self.listed)  # a snapshot, as the topic service's

    def is_internal(self, topic: str) -> bool:
        return False


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


def three_clusters(store: object, west_url: str, north_url: str
                   ) -> tuple[ReplicationService, dict[str, Remote]]:
    """East's service with topic "trio" among east, west and north, group g committed at 25
    here, and a replicator to each remote at offset sync (20, 15)."""
    namespaces = Namespaces({"trio": ["east", "west", "north"]})
    coordinator = Coordinator({"g": {("trio", 0): Offset(25)}})
    service = ReplicationService(store, object(), namespaces,  # type: ignore[arg-type]
                                 ReplicationConfig(cluster_name="east"), coordinator)
    remotes = {"west": Remote(RemoteCluster("west", "127.0.0.1:9", admin_url=west_url)),
               "north": Remote(RemoteCluster("north", "127.0.0.1:9", admin_url=north_url))}
    for name, remote in remotes.items():
        service._remotes[name] = remote  # type: ignore[assignment]
        service._running[(name, "trio", 0)] = _Running(
            Replicator(Checkpoint(syncs=[(20, 15)])),  # type: ignore[arg-type]
            trio.CancelScope())
    return service, remotes


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


async def test_a_hung_remote_admin_api_holds_back_neither_the_round_nor_other_remotes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Among three clusters the remotes' admin APIs are asked at once, and a round waits for
    them only FETCH_ROUND_S: west's never answers (its fetch would wait for ever here), north's
    does, and north gets the group's offset.  One after the other, the round waited for west's
    fetch to time out before north was even asked."""
    monkeypatch.setattr(remote_admin, "TIMEOUT_S", 3600.0)
    monkeypatch.setattr(offset_push, "FETCH_ROUND_S", 1.0)
    store = await open_store(f"embedded:{tmp_path}")
    hung = socket.socket()  # listens, takes the connection (backlog), never answers
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    view = {"inbound": [], "scanned": 30, "unnoted": 0, "syncs": [[30, 25]]}
    answer = (200, {"Content-Type": "application/json"}, json.dumps(
        {"cluster": "north", "partitions": {"0": {"east": view, "west": view}}}).encode())
    try:
        with serving(answer) as (url, _):
            service, remotes = three_clusters(
                store, f"http://127.0.0.1:{hung.getsockname()[1]}", url)
            with trio.fail_after(60):  # generous: the round itself waits 1 s for west
                await service.push_offsets()
            assert remotes["north"].commits == [("g", "trio", {0: 30})]
            assert remotes["west"].commits == []
    finally:
        hung.close()
        await store.close()


async def test_an_endless_admin_answer_is_one_warning_and_the_round_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """West's admin URL answers with a body that never ends: each round cuts it off at the
    cap (west gets no offset, as a remote that is down), north still gets the group's offset,
    and the log says so once, in one WARNING line without a traceback."""
    monkeypatch.setattr(remote_admin, "MAX_ANSWER_BYTES", 1 << 20)
    store = await open_store(f"embedded:{tmp_path}")
    view = {"inbound": [], "scanned": 30, "unnoted": 0, "syncs": [[30, 25]]}
    answer = (200, {"Content-Type": "application/json"}, json.dumps(
        {"cluster": "north", "partitions": {"0": {"east": view, "west": view}}}).encode())
    try:
        with serving(answer) as (url, _), serving_endless() as endless:
            service, remotes = three_clusters(store, endless, url)
            with caplog.at_level(logging.WARNING, logger="ledgerwire.replication"):
                for _ in range(2):
                    with trio.fail_after(60):
                        await service.push_offsets()
            assert remotes["north"].commits == [("g", "trio", {0: 30})]
            assert remotes["west"].commits == []
            warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [(r.getMessage(), r.exc_info) for r in warned] == [
                ("inbound pairs of trio from west: west's admin API answered more than "
                 "1048576 bytes", None)]
    finally:
        await store.close()


async def test_the_memory_of_pushed_offsets_goes_with_the_topic_or_the_remote(
        tmp_path: Path) -> None:
    """What the service remembers per remote and topic (the floors it never pushes below, what
    it pushed for partitions another broker replicates) is dropped by the next scan once the
    topic is deleted, or once the remote is taken off the topic's replication clusters, and
    kept while it still replicates.  It grew for ever (and a topic created again under the
    same name inherited the old floors)."""
    store = await open_store(f"embedded:{tmp_path}")
    try:
        topics = Topics({"gone": TopicInfo(1), "kept": TopicInfo(2), "moved": TopicInfo(1)})
        namespaces = Namespaces({"gone": ["east", "west"], "kept": ["east", "west"],
                                 "moved": ["east", "west", "north"]})
        coordinator = Coordinator({"g": {(t, 0): Offset(25) for t in topics.listed}})
        service = ReplicationService(store, topics, namespaces,  # type: ignore[arg-type]
                                     ReplicationConfig(cluster_name="east"), coordinator)
        service._remotes["west"] = Remote()  # type: ignore[assignment]
        for topic in topics.listed:
            service._running[("west", topic, 0)] = _Running(
                Replicator(Checkpoint(syncs=[(10, 4), (20, 15)])),  # type: ignore[arg-type]
                trio.CancelScope())
        await service.push_offsets()
        for key in [("west", "gone", 0), ("west", "kept", 1), ("north", "moved", 0)]:
            service._pushed_elsewhere[key] = {"g": 7}  # partitions another broker replicates
        assert {k[1] for k, _ in service._floors} == {"gone", "kept"}

        del topics.listed["gone"]
        namespaces.clusters["moved"] = ["east", "west"]  # north taken off
        async with trio.open_nursery() as nursery:
            await service._reconcile(nursery)
            nursery.cancel_scope.cancel()
        assert list(service._floors) == [(("west", "kept", 0), "g")]
        assert list(service._pushed_elsewhere) == [("west", "kept", 1)]
    finally:
        await store.close()
