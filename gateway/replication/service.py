"""The replication service of one process: which partitions go where, and their status.

Every `SCAN_INTERVAL_S` it compares what should replicate (each topic whose namespace lists
other clusters in `replication_clusters`, every partition of it, to each listed cluster that is
registered) with the replicators running, starts the missing ones and stops the ones no longer
wanted.  A listed cluster that is not registered shows as an error row in the status.  It also
pushes translated group offsets to the remotes (gateway/replication/offset_translation.py):
a group's offset is committed there as an admin commit, which a remote group with live members
refuses, so a group that already runs there is left alone.  In a cluster the broker
coordinating a group pushes its offsets for every partition: through the running replicator's
checkpoint, or the stored one of a partition another broker replicates.  Those commits carry
the metadata "lw.replication", and an offset with that metadata is never pushed on: offsets
do not loop.  For a topic replicated among three or more clusters the translation also
bounds each third cluster's records in the remote (offset_translation.py's translate_among):
it needs the remote's checkpoints (inbound pairs, scan positions, outbound syncs), fetched
from its admin API each round (gateway/replication/remote_admin.py; `inbound` serves this
side's).  A translation found for a committed offset is never pushed lower while the group's
offset here does not go back: what the group read below it stays read, and a later round may
know less (a third cluster's records arrived there since).  That memory (per process) goes
when the topic is deleted here (at once) or elsewhere, or the remote is taken off its clusters
(the next scan).  A remote
without a reachable admin API gets no offsets for such a topic: a third cluster's records
there could be skipped.

Each replicated topic's configs follow it: every `CONFIG_LOOK_INTERVAL_S` a topic whose configs
here differ from those last agreed with a remote has the changes pushed there
(gateway/replication/topic_configs.py settles which side's change wins); a partition added here
is added there when its replicator starts (remote.py's ensure_topic).

A topic paused by an operator (gateway/replication/paused_topics.py) has its replicators
stopped; its rows stay in the status as "paused", with the backlog counted from the log, until
it is resumed and they start again from their checkpoints.

What replication keeps in the store per topic (checkpoints, agreed configs, the paused mark)
goes with the topic: while the service runs it is a deletion hook of the topic service, and at
its start it collects what topics deleted meanwhile left (gateway/replication/deleted_topics.py).

A process that owns every partition (a standalone) replicates them all.  In a cluster (`owns`
given: the ownership lease of gateway/cluster/ownership.py) a broker replicates only the
partitions it owns; when a bundle is released (gateway/replication/bundle_hooks.py) its
replicators are stopped and awaited before the bundle's logs close, and the next owner's scan
starts them from the checkpoint (whose claim fences any writer left behind).  A replicator that
ends (its checkpoint claimed elsewhere) is forgotten there, so it starts again if the partition
is still, or again, owned here.

Pushing group offsets to the remotes is offset_push.py's (a mixin of the service).
This module must never reach into a partition log except through the topic service.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.config.settings import ReplicationConfig
from gateway.replication.checkpoints import CheckpointStore, read_checkpoint
from gateway.replication.clusters import ClusterError, ClusterRegistry
from gateway.replication.deleted_topics import collect_orphans, collect_topic
from gateway.replication.offset_push import Key, OffsetPushing
from gateway.replication.paused_topics import paused_topics, write_paused
from gateway.replication.remote import RemoteError, RemoteKafka
from gateway.replication.replicator import PartitionReplicator
from gateway.replication.topic_configs import config_changes, read_agreed, save_agreed
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.topic_node import TopicInfo
from ledger_backend.metadata.store import MetadataError, MetadataStore

log = logging.getLogger("ledgerwire.replication")

SCAN_INTERVAL_S = 2.0
CONFIG_LOOK_INTERVAL_S = 0.5  # configs here against those agreed (in memory: cheap)
FULL_CONFIG_LOOK_EVERY = 20  # a topic whose configs did not change here is compared this seldom


@dataclass
class _Running:
    replicator: PartitionReplicator
    scope: trio.CancelScope
    pushed: dict[str, int] = field(default_factory=dict)  # group -> offset last committed there
    done: trio.Event = field(default_factory=trio.Event)  # set when the replicator has ended


class ReplicationService(OffsetPushing):
    """Runs the replicators of this process (see the module docstring)."""

    def __init__(self, store: MetadataStore, topics: Any, namespaces: NamespaceRegistry,
                 config: ReplicationConfig, coordinator: Any = None, *,
                 owns: Callable[[str, int], bool] | None = None) -> None:
        self.store = store
        self.owns = owns  # None: every partition is local (a standalone)
        self.topics = topics
        self.namespaces = namespaces
        self.config = config
        self.coordinator = coordinator
        self.clusters = ClusterRegistry(store, config.cluster_name)
        self._running: dict[Key, _Running] = {}
        self._remotes: dict[str, RemoteKafka] = {}
        self._problems: dict[Key, str] = {}
        self._paused: dict[Key, PartitionReplicator] = {}  # stopped by a pause, for the status
        self._agreed: dict[tuple[str, str], dict[str, str]] = {}  # (remote, topic) -> configs
        self._stuck_configs: dict[tuple[str, str], dict[str, int]] = {}
        self._config_looks: dict[tuple[str, str], int] = {}
        self._pushed_elsewhere: dict[Key, dict[str, int]] = {}  # replicated by another broker
        # (key, group) -> (committed here, translated): the largest translation found for it
        self._floors: dict[tuple[Key, str], tuple[int, int]] = {}
        self._oversized: set[tuple[str, str]] = set()  # (remote, topic) warned about
        # (the catalogue snapshot, the namespace registry's version, what _replicated found)
        self._replicated_memo: tuple[Mapping[str, TopicInfo], int,
                                     dict[str, tuple[set[str], int]]] | None = None

    @property
    def cluster_name(self) -> str:
        return self.config.cluster_name

    def _replicated(self) -> dict[str, tuple[set[str], int]]:
        """topic -> (the remotes it replicates to, its partition count), cluster-wide, in
        name order; the caller must not change it.

        Derived from the topic catalogue and the namespace policies only, so it is kept and
        worked out again only when either changed: the topic service hands out a new
        snapshot after every catalogue change, the registry bumps its version after every
        policy change.  An idle scan then costs no per-topic work (with 10,000 topics a
        policy lookup each every scan was most of an idle standalone's CPU); a changed
        catalogue costs a lookup per topic created or changed, a policy change one per
        topic."""
        listed = self.topics.topics()
        version = self.namespaces.version
        memo = self._replicated_memo
        if memo is not None and memo[0] is listed and memo[1] == version:
            return memo[2]
        if memo is not None and memo[1] == version:
            before, found = memo[0], {n: e for n, e in memo[2].items() if n in listed}
            for name, info in listed.items():
                if before.get(name) is not info:
                    found.pop(name, None)
                    self._look_up(name, info, found)
        else:
            found = {}
            for name, info in listed.items():
                self._look_up(name, info, found)
        out = {name: found[name] for name in sorted(found)}
        self._replicated_memo = (listed, version, out)
        return out

    def _look_up(self, name: str, info: TopicInfo,
                 out: dict[str, tuple[set[str], int]]) -> None:
        """Enter `name` in `out` if it replicates to any other cluster."""
        if self.topics.is_internal(name):
            return
        targets = self.namespaces.topic_policies(name).replication_clusters or []
        remotes = {r for r in targets if r != self.cluster_name}
        if remotes:
            out[name] = (remotes, info.partitions)

    def wanted(self, replicated: dict[str, tuple[set[str], int]] | None = None
               ) -> list[tuple[str, str, int]]:
        out: list[Key] = []
        if replicated is None:
            replicated = self._replicated()
        for name, (remotes, partitions) in replicated.items():
            for remote in sorted(remotes):
                out.extend((remote, name, p) for p in range(partitions) if self._local(name, p))
        return out

    def _forget_unreplicated(self, replicated: dict[str, tuple[set[str], int]]) -> None:
        """Drop the memory kept per remote and topic (or partition) that no longer replicates
        anywhere: its topic deleted, or the remote taken off its replication clusters.  A
        long run creating and deleting topics would otherwise grow it without bound, and a
        topic deleted and created again must not inherit a floor of the old one."""
        def gone(remote: str, topic: str, partition: int = 0) -> bool:
            entry = replicated.get(topic)
            return entry is None or remote not in entry[0] or partition >= entry[1]

        self._forget(gone)

    def _forget(self, gone: Callable[..., bool]) -> None:
        """Drop the memory of each (remote, topic[, partition]) that `gone` picks."""
        for floor in [f for f in self._floors if gone(*f[0])]:
            del self._floors[floor]
        for key in [k for k in self._pushed_elsewhere if gone(*k)]:
            del self._pushed_elsewhere[key]
        for memory in (self._agreed, self._stuck_configs, self._config_looks):
            for pair in [p for p in memory if gone(*p)]:
                del memory[pair]
        self._oversized = {p for p in self._oversized if not gone(*p)}

    def _local(self, topic: str, partition: int) -> bool:
        return self.owns is None or self.owns(topic, partition)

    async def stop_where(self, match: Callable[[str, int], bool],
                         timeout_s: float = 30.0) -> None:
        """Stop the replicators of the partitions `match` picks and wait until they have ended
        (a bundle being released: none may touch its logs or checkpoints afterwards)."""
        stopping = [self._running.pop(k) for k in list(self._running) if match(k[1], k[2])]
        for running in stopping:
            running.scope.cancel()
        with trio.move_on_after(timeout_s):
            for running in stopping:
                await running.done.wait()
        for key in [k for k in self._paused if match(k[1], k[2])]:
            del self._paused[key]

    async def topic_deleted(self, info: TopicInfo) -> None:
        """The topic service's deletion hook: stop the topic's replicators here, forget what
        is kept in memory for it, and remove its records from the store."""
        await self.stop_where(lambda topic, _: topic == info.name)
        self._forget(lambda _, topic, partition=0: topic == info.name)
        for remote in self._remotes.values():
            remote.forget_topic(info.name)
        await collect_topic(self.store, info.name, str(info.topic_id))

    async def _collect_orphans(self) -> None:
        try:
            await collect_orphans(self.store)
        except MetadataError as exc:
            log.warning("replication: records of deleted topics not collected: %r", exc)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.topics.deletion_hooks.append(self.topic_deleted)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                nursery.start_soon(self._collect_orphans)
                nursery.start_soon(self._push_offsets_forever)
                nursery.start_soon(self._follow_configs_forever)
                while True:
                    try:
                        await self._reconcile(nursery)
                    except (MetadataError, ClusterError) as exc:
                        log.warning("replication: %s", exc)
                    await trio.sleep(SCAN_INTERVAL_S)
        finally:
            self.topics.deletion_hooks.remove(self.topic_deleted)
            with trio.CancelScope(shield=True):
                for remote in self._remotes.values():
                    await remote.aclose()

    async def _reconcile(self, nursery: trio.Nursery) -> None:
        replicated = self._replicated()
        self._forget_unreplicated(replicated)
        wanted = self.wanted(replicated)
        paused = await paused_topics(self.store)
        registered = {c.name: c for c in await self.clusters.list()}
        self._problems = {}
        keep: set[Key] = set()
        for key in wanted:
            cluster = registered.get(key[0])
            if cluster is None:
                self._problems[key] = f"cluster {key[0]!r} is not registered"
                continue
            remote = self._remotes.get(cluster.name)
            if remote is None or remote.cluster != cluster:
                if remote is not None:  # its settings changed: restart its replicators
                    for k in [k for k in self._running if k[0] == cluster.name]:
                        self._running.pop(k).scope.cancel()
                    await remote.aclose()
                remote = self._remotes[cluster.name] = RemoteKafka(
                    cluster, f"ledgerwire-replicator-{self.cluster_name}")
            keep.add(key)
            if key[1] in paused:
                await self._pause(key, remote)
            elif key not in self._running and self._local(key[1], key[2]):
                self._paused.pop(key, None)
                self._start(nursery, key, remote)
        for key in [k for k in self._running if k not in keep]:
            self._running.pop(key).scope.cancel()
        for key in [k for k in self._paused if k not in keep or k[1] not in paused]:
            del self._paused[key]

    async def _pause(self, key: Key, remote: RemoteKafka) -> None:
        """Stop the key's replicator (if it runs) and keep its status row up to date."""
        running = self._running.pop(key, None)
        if running is not None:
            running.scope.cancel()
            self._paused[key] = running.replicator
        elif key not in self._paused:
            replicator = self._paused[key] = self._replicator(key, remote)
            checkpoint = await read_checkpoint(self.store, *key)
            replicator.status.source_next = checkpoint.source_next if checkpoint else 0
        replicator = self._paused[key]
        replicator.status.state, replicator.status.last_error = "paused", ""
        replicator.status.oldest_unsent_ms = None
        replicator.refresh_backlog()
        replicator.status.lag_seconds = 0.0

    async def set_paused(self, topic: str, paused: bool) -> dict[str, Any]:
        """Pause or resume replication of a topic (effective within a scan interval here, and
        on every process sharing the metadata store)."""
        if topic not in self.topics.topics():
            raise ClusterError(f"topic {topic!r} does not exist", 404)
        await write_paused(self.store, topic, paused)
        return {"topic": topic, "paused": paused}

    def _replicator(self, key: Key, remote: RemoteKafka) -> PartitionReplicator:
        name, topic, partition = key
        return PartitionReplicator(
            self.topics, remote, CheckpointStore(self.store, name, topic, partition),
            self.cluster_name, topic, partition,
            checkpoint_interval_s=self.config.checkpoint_interval_s,
            retry_backoff_s=self.config.retry_backoff_s,
            forward_min_bytes=self.config.forward_min_bytes)

    def _start(self, nursery: trio.Nursery, key: Key, remote: RemoteKafka) -> None:
        name, topic, partition = key
        replicator = self._replicator(key, remote)
        scope = trio.CancelScope()
        entry = self._running[key] = _Running(replicator, scope)

        async def run() -> None:
            try:
                with scope:
                    try:
                        await replicator.run()
                    except Exception as exc:  # a bug: show it, keep the broker up
                        log.exception("replicator of %s-%d to %s failed", topic, partition,
                                      name)
                        replicator.status.state = "failed"
                        replicator.status.last_error = repr(exc)
            finally:
                entry.done.set()
                if self.owns is not None and self._running.get(key) is entry:
                    del self._running[key]  # ended on its own: the next scan may restart it

        nursery.start_soon(run)

    def status(self) -> dict[str, Any]:
        rows = self.metrics_rows()
        rows += [{"remote": k[0], "topic": k[1], "partition": k[2], "state": "error",
                  "position": None, "backlog_messages": None, "lag_seconds": None,
                  "sent_total": 0, "last_error": problem}
                 for k, problem in sorted(self._problems.items())]
        return {"cluster": self.cluster_name, "partitions": rows}

    def metrics_rows(self) -> list[dict[str, Any]]:
        replicators = {k: r.replicator for k, r in self._running.items()} | self._paused
        return [r.status.to_json() for _, r in sorted(replicators.items())]

    async def _follow_configs_forever(self) -> None:
        while True:  # jittered: two sides' pushes crossing on the wire must not repeat
            await trio.sleep(CONFIG_LOOK_INTERVAL_S * random.uniform(0.5, 1.5))
            for remote_name, topic in sorted({k[:2] for k in self._running}):
                remote = self._remotes.get(remote_name)
                info = self.topics.topics().get(topic)
                if remote is None or info is None:
                    continue
                try:
                    await self.follow_configs(remote, topic, dict(info.configs))
                except (RemoteError, MetadataError, ValueError) as exc:
                    log.debug("configs of %s to %s: %s", topic, remote_name, exc)

    async def follow_configs(self, remote: RemoteKafka, topic: str,
                             here: dict[str, str]) -> None:
        """Push the topic's config changes to `remote` (see the module docstring)."""
        key = (remote.cluster.name, topic)
        agreed = self._agreed.get(key)
        if agreed is None:
            agreed = self._agreed[key] = await read_agreed(self.store, *key)
        stuck = self._stuck_configs.setdefault(key, {})
        looks = self._config_looks[key] = self._config_looks.get(key, 0) + 1
        if here == agreed and not stuck and looks % FULL_CONFIG_LOOK_EVERY:
            return  # nothing changed here; now and then look there too (a stuck key)
        there = await remote.topic_configs(topic)
        push, now_agreed = config_changes(here, agreed, there,
                                          self.cluster_name < remote.cluster.name, stuck)
        if push:
            await remote.alter_topic_configs(topic, push)
            log.info("configs of topic %s pushed to cluster %s: %s", topic, remote.cluster.name,
                     push)
        if now_agreed != agreed:
            info = self.topics.topics().get(topic)
            await save_agreed(self.store, *key, now_agreed,
                              str(info.topic_id) if info is not None else None)
            self._agreed[key] = now_agreed
