"""The replication service of one process: which partitions go where, and their status.

Every `SCAN_INTERVAL_S` it compares what should replicate (each topic whose namespace lists
other clusters in `replication_clusters`, every partition of it, to each listed cluster that is
registered) with the replicators running, starts the missing ones and stops the ones no longer
wanted.  A listed cluster that is not registered shows as an error row in the status.  It also
pushes translated group offsets to the remotes (gateway/replication/offset_translation.py):
a group's offset is committed there as an admin commit, which a remote group with live members
refuses, so a group that already runs there is left alone.  Those commits carry the metadata
"lw.replication", and an offset with that metadata is never pushed on: offsets do not loop.

A process that owns every partition (a standalone) replicates them all; in a cluster, the
replicator of a partition belongs on its owner broker and that wiring is not done yet.

This module must never reach into a partition log except through the topic service.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.config.settings import ReplicationConfig
from gateway.replication.checkpoints import CheckpointStore
from gateway.replication.clusters import ClusterError, ClusterRegistry
from gateway.replication.offset_translation import translate
from gateway.replication.remote import PUSHED_METADATA, RemoteError, RemoteKafka
from gateway.replication.replicator import PartitionReplicator
from gateway.topics.namespaces import NamespaceRegistry
from ledger_backend.metadata.store import MetadataError, MetadataStore

log = logging.getLogger("ledgerwire.replication")

SCAN_INTERVAL_S = 2.0
OFFSET_SYNC_INTERVAL_S = 2.0

Key = tuple[str, str, int]  # remote cluster, topic, partition


@dataclass
class _Running:
    replicator: PartitionReplicator
    scope: trio.CancelScope
    pushed: dict[str, int] = field(default_factory=dict)  # group -> offset last committed there


class ReplicationService:
    """Runs the replicators of this process (see the module docstring)."""

    def __init__(self, store: MetadataStore, topics: Any, namespaces: NamespaceRegistry,
                 config: ReplicationConfig, coordinator: Any = None) -> None:
        self.store = store
        self.topics = topics
        self.namespaces = namespaces
        self.config = config
        self.coordinator = coordinator
        self.clusters = ClusterRegistry(store, config.cluster_name)
        self._running: dict[Key, _Running] = {}
        self._remotes: dict[str, RemoteKafka] = {}
        self._problems: dict[Key, str] = {}

    @property
    def cluster_name(self) -> str:
        return self.config.cluster_name

    def wanted(self) -> list[tuple[str, str, int]]:
        out: list[Key] = []
        for name, info in sorted(self.topics.topics().items()):
            if self.topics.is_internal(name):
                continue
            targets = self.namespaces.topic_policies(name).replication_clusters or []
            for remote in targets:
                if remote != self.cluster_name:
                    out.extend((remote, name, p) for p in range(info.partitions))
        return out

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                nursery.start_soon(self._push_offsets_forever)
                while True:
                    try:
                        await self._reconcile(nursery)
                    except (MetadataError, ClusterError) as exc:
                        log.warning("replication: %s", exc)
                    await trio.sleep(SCAN_INTERVAL_S)
        finally:
            with trio.CancelScope(shield=True):
                for remote in self._remotes.values():
                    await remote.aclose()

    async def _reconcile(self, nursery: trio.Nursery) -> None:
        wanted = self.wanted()
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
            if key not in self._running:
                self._start(nursery, key, remote)
        for key in [k for k in self._running if k not in keep]:
            self._running.pop(key).scope.cancel()

    def _start(self, nursery: trio.Nursery, key: Key, remote: RemoteKafka) -> None:
        name, topic, partition = key
        replicator = PartitionReplicator(
            self.topics, remote, CheckpointStore(self.store, name, topic, partition),
            self.cluster_name, topic, partition,
            checkpoint_interval_s=self.config.checkpoint_interval_s,
            retry_backoff_s=self.config.retry_backoff_s)
        scope = trio.CancelScope()
        self._running[key] = _Running(replicator, scope)

        async def run() -> None:
            with scope:
                try:
                    await replicator.run()
                except Exception as exc:  # a bug: show it, keep the broker up
                    log.exception("replicator of %s-%d to %s failed", topic, partition, name)
                    replicator.status.state, replicator.status.last_error = "failed", repr(exc)

        nursery.start_soon(run)

    def status(self) -> dict[str, Any]:
        rows = [r.replicator.status.to_json() for _, r in sorted(self._running.items())]
        rows += [{"remote": k[0], "topic": k[1], "partition": k[2], "state": "error",
                  "position": None, "backlog_messages": None, "lag_seconds": None,
                  "sent_total": 0, "last_error": problem}
                 for k, problem in sorted(self._problems.items())]
        return {"cluster": self.cluster_name, "partitions": rows}

    def metrics_rows(self) -> list[dict[str, Any]]:
        return [r.replicator.status.to_json() for _, r in sorted(self._running.items())]

    async def _push_offsets_forever(self) -> None:
        while True:
            await trio.sleep(OFFSET_SYNC_INTERVAL_S)
            if self.coordinator is not None:
                await self.push_offsets()

    async def push_offsets(self) -> None:
        """Commit each local group's translated offsets to every remote its topics go to."""
        for group_id, committed in sorted(self.coordinator.offsets.items()):
            by_remote: dict[tuple[str, str], dict[int, int]] = {}
            for (topic, partition), offset in committed.items():
                if offset.offset < 0 or offset.metadata == PUSHED_METADATA:
                    continue  # never push back what a remote pushed here (no offset loops)
                for key, running in self._running.items():
                    if key[1:] != (topic, partition):
                        continue
                    translated = translate(running.replicator.checkpoint, offset.offset)
                    if running.pushed.get(group_id) != translated:
                        by_remote.setdefault((key[0], topic), {})[partition] = translated
            for (remote_name, topic), offsets in by_remote.items():
                remote = self._remotes.get(remote_name)
                if remote is None:
                    continue
                try:
                    errors = await remote.commit_offsets(group_id, topic, offsets)
                except RemoteError as exc:
                    log.debug("offset push of %s to %s: %s", group_id, remote_name, exc)
                    continue
                for partition, code in errors.items():
                    target = self._running.get((remote_name, topic, partition))
                    if code == 0 and target is not None:
                        target.pushed[group_id] = offsets[partition]
