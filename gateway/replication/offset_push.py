"""Group offsets pushed to the remotes a topic replicates to (a mixin of ReplicationService).

Every `OFFSET_SYNC_INTERVAL_S` each local group's committed offsets are translated
(gateway/replication/offset_translation.py) through the checkpoint of each remote the partition
goes to -- the running replicator's, or in a cluster the stored one of a partition another
broker replicates -- and committed there as admin commits carrying PUSHED_METADATA, never
pushed on again.  Among three or more clusters the translation needs each remote's own
checkpoints, fetched from its admin API each round (`inbound` serves this side's); a
translation is never pushed lower while the group's offset here does not go back (`_floors`).
service.py's docstring tells the whole story; this module holds those steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from gateway.replication.checkpoints import Checkpoint, read_checkpoint
from gateway.replication.clusters import ClusterError
from gateway.replication.offset_translation import LinkView, translate, translate_among
from gateway.replication.remote import PUSHED_METADATA, RemoteError, RemoteKafka
from gateway.replication.remote_admin import (
    AnswerTooLarge,
    Inbound,
    RemoteAdminError,
    fetch_inbound,
)
from gateway.replication.replicator import PartitionReplicator
from gateway.topics.namespaces import NamespaceRegistry
from ledger_backend.metadata.store import MetadataStore

log = logging.getLogger("ledgerwire.replication")

OFFSET_SYNC_INTERVAL_S = 2.0
FETCH_ROUND_S = 5.0  # the remotes' admin APIs answer a round's fetches within this, or not

Key = tuple[str, str, int]  # remote cluster, topic, partition


class RunningReplicator(Protocol):
    """What the offset push reads of a running replicator's entry (service.py's _Running)."""

    replicator: PartitionReplicator
    pushed: dict[str, int]  # group -> offset last committed there


class OffsetPushing:
    store: MetadataStore
    owns: Callable[[str, int], bool] | None
    topics: Any
    namespaces: NamespaceRegistry
    coordinator: Any
    _running: Mapping[Key, RunningReplicator]
    _remotes: dict[str, RemoteKafka]
    _pushed_elsewhere: dict[Key, dict[str, int]]
    _floors: dict[tuple[Key, str], tuple[int, int]]
    _oversized: set[tuple[str, str]]

    if TYPE_CHECKING:

        @property
        def cluster_name(self) -> str: ...

        def _local(self, topic: str, partition: int) -> bool: ...

    async def _push_offsets_forever(self) -> None:
        while True:
            await trio.sleep(OFFSET_SYNC_INTERVAL_S)
            if self.coordinator is not None:
                await self.push_offsets()

    async def _translators(self, topic: str, partition: int,
                           read: dict[Key, Checkpoint | None]) -> list[tuple[Key, Checkpoint,
                                                                            dict[str, int]]]:
        """(key, checkpoint, offsets pushed) of each remote the partition replicates to: the
        running replicator's, or in a cluster, when another broker replicates it, the stored
        checkpoint (read once per round into `read`)."""
        out: list[tuple[Key, Checkpoint, dict[str, int]]] = []
        for key, running in self._running.items():
            if key[1:] == (topic, partition):
                out.append((key, running.replicator.checkpoint, running.pushed))
        if self.owns is None or self._local(topic, partition):
            return out
        targets = self.namespaces.topic_policies(topic).replication_clusters or []
        for remote in targets:
            key = (remote, topic, partition)
            if remote == self.cluster_name or remote not in self._remotes:
                continue
            if key not in read:
                read[key] = await read_checkpoint(self.store, *key)
            checkpoint = read[key]
            if checkpoint is not None:
                out.append((key, checkpoint, self._pushed_elsewhere.setdefault(key, {})))
        return out

    async def inbound(self, topic: str) -> dict[str, Any]:
        """This cluster's view of each partition of `topic` and each other cluster it
        replicates with, from the stored checkpoints (a stale one only makes a translation
        smaller): inbound pairs, scan position, the offset below which records may have been
        passed unnoted, and the outbound offset syncs, for the remotes' translations
        (offset_translation.py's LinkView)."""
        info = self.topics.topics().get(topic)
        if info is None:
            raise ClusterError(f"no topic {topic!r}", 404)
        targets = self.namespaces.topic_policies(topic).replication_clusters or []
        partitions: dict[str, dict[str, Any]] = {}
        for p in range(info.partitions):
            row = partitions[str(p)] = {}
            for remote in targets:
                if remote != self.cluster_name:
                    checkpoint = await read_checkpoint(self.store, remote, topic, p)
                    row[remote] = ({"inbound": checkpoint.inbound,
                                    "scanned": checkpoint.source_next,
                                    "unnoted": checkpoint.unnoted, "syncs": checkpoint.syncs}
                                   if checkpoint is not None else
                                   {"inbound": [], "scanned": 0, "unnoted": 0, "syncs": []})
        return {"cluster": self.cluster_name, "partitions": partitions}

    async def _translate(self, key: Key, checkpoint: Checkpoint, committed: int,
                         thirds: list[str], there: dict[tuple[str, str], Inbound | None],
                         read: dict[Key, Checkpoint | None]) -> int | None:
        """`committed` here as an offset in remote key[0] (None: it cannot be bounded now)."""
        if not thirds:
            return translate(checkpoint, committed)
        remote_name, topic, partition = key
        fetched = there.get((remote_name, topic))
        if fetched is None or partition not in fetched:
            return None
        inbound_here: dict[str, list[tuple[int, int]]] = {}
        for x in thirds:
            running = self._running.get((x, topic, partition))
            if running is not None:
                inbound_here[x] = list(running.replicator.checkpoint.inbound)
            else:
                if (x, topic, partition) not in read:
                    read[(x, topic, partition)] = await read_checkpoint(self.store, x, topic,
                                                                        partition)
                stored = read[(x, topic, partition)]
                inbound_here[x] = stored.inbound if stored is not None else []
        views = fetched[partition]
        return translate_among(checkpoint, committed, inbound_here, self.cluster_name,
                               {y: views.get(y, LinkView()) for y in (*thirds,
                                                                      self.cluster_name)})

    def _not_below(self, key: Key, group_id: str, committed: int, translated: int) -> int:
        """`translated`, or a larger offset found earlier for the same or a smaller committed
        offset: what a group committed here has read below an offset there stays read (B's
        log there only grows), while a later translation may know less (a third cluster's
        records arrived there since).  Forgotten when the group commits lower."""
        floor = self._floors.get((key, group_id))
        if floor is not None and floor[0] <= committed and floor[1] > translated:
            return floor[1]
        self._floors[(key, group_id)] = (committed, translated)
        return translated

    async def _fetch_views(self, wanted: set[tuple[str, str]]
                           ) -> dict[tuple[str, str], Inbound | None]:
        """The checkpoints of each (remote, topic) in `wanted` as the remote's admin API serves
        them, all fetched at once within FETCH_ROUND_S: one that has not answered by then (a
        hung remote) counts as unreachable this round (None), as one that failed."""
        there: dict[tuple[str, str], Inbound | None] = dict.fromkeys(wanted)

        async def fetch(remote_name: str, topic: str) -> None:
            remote = self._remotes.get(remote_name)
            try:
                if remote is None:
                    raise RemoteAdminError(f"cluster {remote_name} is not reached")
                there[(remote_name, topic)] = await fetch_inbound(remote.cluster, topic)
                self._oversized.discard((remote_name, topic))
            except AnswerTooLarge as exc:  # not a remote that is down: someone should look
                if (remote_name, topic) not in self._oversized:
                    self._oversized.add((remote_name, topic))
                    log.warning("inbound pairs of %s from %s: %s", topic, remote_name, exc)
            except RemoteAdminError as exc:
                log.debug("inbound pairs of %s from %s: %s", topic, remote_name, exc)

        with trio.move_on_after(FETCH_ROUND_S):
            async with trio.open_nursery() as nursery:
                for remote_name, topic in sorted(wanted):
                    nursery.start_soon(fetch, remote_name, topic)
        return there

    async def push_offsets(self) -> None:
        """Commit each local group's translated offsets to every remote its topics go to."""
        read: dict[Key, Checkpoint | None] = {}
        wanted: set[tuple[str, str]] = set()  # (remote, topic) among three or more clusters
        for committed in self.coordinator.offsets.values():
            for (topic, _), offset in committed.items():
                members = set(self.namespaces.topic_policies(topic).replication_clusters or [])
                if (len(members | {self.cluster_name}) > 2 and offset.offset >= 0
                        and offset.metadata != PUSHED_METADATA):
                    wanted |= {(r, topic) for r in members if r != self.cluster_name}
        there = await self._fetch_views(wanted) if wanted else {}
        for group_id, committed in sorted(self.coordinator.offsets.items()):
            by_remote: dict[tuple[str, str], dict[int, int]] = {}
            pushed_to: dict[Key, dict[str, int]] = {}
            for (topic, partition), offset in committed.items():
                if offset.offset < 0 or offset.metadata == PUSHED_METADATA:
                    continue  # never push back what a remote pushed here (no offset loops)
                members = {*(self.namespaces.topic_policies(topic).replication_clusters or []),
                           self.cluster_name}
                for key, checkpoint, pushed in await self._translators(topic, partition, read):
                    thirds = sorted(members - {self.cluster_name, key[0]})
                    translated = await self._translate(key, checkpoint, offset.offset, thirds,
                                                       there, read)
                    if translated is not None:
                        translated = self._not_below(key, group_id, offset.offset, translated)
                    if translated is not None and pushed.get(group_id) != translated:
                        by_remote.setdefault((key[0], topic), {})[partition] = translated
                        pushed_to[key] = pushed
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
                    target = pushed_to.get((remote_name, topic, partition))
                    if code == 0 and target is not None:
                        target[group_id] = offsets[partition]
