"""A replicator's durable position and offset syncs, one metadata node per partition and remote.

    /ledgerwire/replication/<remote>/<topic>/<partition>
        {"format": 1, "source_next": S, "remote_next": R, "syncs": [[s, r], ...],
         "inbound": [[a, o], ...], "unnoted": U, "foreign_from": F, "settled": true|false,
         "producer": [producer id, epoch], "sequence": Q}

`source_next`/`remote_next` is a pair the remote has acknowledged: every record written here
below local offset S is in the remote below offset R, and whatever is sent later lands at R or
after.  `syncs` keeps the last `MAX_SYNCS` such pairs (MirrorMaker 2's offset syncs), so a
group's committed offset here translates to the remote.  `inbound` keeps pairs (a, o): the
record at local offset a - 1 came from the remote and was its offset o - 1 there, so a group
committed at or past a has read everything the remote wrote below o.  `unnoted`: below it a
session may have passed records without noting their inbound pairs (it resumed past what a
crashed predecessor had sent and not checkpointed); at and above it every record from the
remote below S is noted (its own pair, or a later one of its batch).  A node written before
the field existed has it at its S.  `foreign_from`: the lowest remote offset seen to hold a
record that is not this side's (the remote's end when nothing had been sent yet, or a gap
between two acknowledged sends), -1 while none was seen: below it the remote holds only this
side's records (what a translation needs while `inbound` is still empty).  A node written
before the field existed has -1 (the presumption translations made before).

`producer` is the idempotent producer id and epoch the replicator writes to the remote with,
kept for good (taken once from the remote), and `sequence` is the sequence number the record
at S is (or will be) sent with: sequence numbers count the records sent, so every record has
the same one in every session, and a batch that the remote applies late (after a session gave
up on it) is refused there as out of order, or taken as the retry of one it has.

`settled` says that no batch sent under this claim is unanswered: every one sent is within
(S, R).  It is written true only while the replicator's sender is held back and nothing is in
flight, and false again before the next send (and by every claim), so a new session that reads
it true can skip the scan of the remote's tail.

The replicator claims the node when it starts (a version bump), and every later write is a
compare-and-set on the version it holds: a replicator that lost its partition cannot move the
position any more.  This module must never write without that check.

A topic's deletion wins over its replicators (deleted_topics.py removes the nodes): a save
never creates a node (a removed one is a lost claim), and a claim, which may create one, reads
the topic's node after its own write and takes the checkpoint back when the topic is deleting,
gone or another topic of the name.  In the metadata store's one order of writes either the
claim's write came before the deletion's "deleting" mark, and then the collection that follows
the mark sees the node and removes it (retrying past a claimer's or saver's version bump), or
it came after, and the claim's read, made after its own write, sees the mark (ZooKeeper: a
session sees its own writes and everything ordered before them).  Before, a replicator on a
broker that had not yet seen the deletion put a checkpoint back, and its parent with it, and
only the service's next start collected them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from gateway.topics.topic_store import TopicStore
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

log = logging.getLogger(__name__)

REPLICATION_PATH = "/ledgerwire/replication"
CHECKPOINT_FORMAT_VERSION = 1
MAX_SYNCS = 64


class CheckpointLost(Exception):
    """Another replicator claimed this position (ownership moved): stop replicating it."""


@dataclass
class Checkpoint:
    source_next: int = 0
    remote_next: int = -1  # -1: nothing acknowledged yet (scan the remote from its start)
    syncs: list[tuple[int, int]] = field(default_factory=list)
    inbound: list[tuple[int, int]] = field(default_factory=list)
    unnoted: int = 0
    foreign_from: int = -1
    settled: bool = False
    producer: tuple[int, int] | None = None  # (id, epoch) there; None: not taken yet
    sequence: int = 0  # of the record at source_next
    topic_id: str | None = None  # the local topic's id; None: written before the field

    def to_bytes(self) -> bytes:
        return json.dumps({"format": CHECKPOINT_FORMAT_VERSION, "source_next": self.source_next,
                           "remote_next": self.remote_next, "syncs": self.syncs,
                           "inbound": self.inbound, "unnoted": self.unnoted,
                           "foreign_from": self.foreign_from, "settled": self.settled,
                           "producer": self.producer, "sequence": self.sequence,
                           "topic_id": self.topic_id}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        doc = json.loads(data)
        if doc.get("format") != CHECKPOINT_FORMAT_VERSION:
            raise ValueError(f"unknown replication checkpoint format {doc.get('format')}")
        return cls(int(doc["source_next"]), int(doc["remote_next"]),
                   [(int(s), int(r)) for s, r in doc.get("syncs", [])],
                   [(int(a), int(o)) for a, o in doc.get("inbound", [])],
                   int(doc.get("unnoted", doc["source_next"])),
                   int(doc.get("foreign_from", -1)), bool(doc.get("settled", False)),
                   tuple(int(x) for x in doc["producer"])  # type: ignore[arg-type]
                   if doc.get("producer") else None, int(doc.get("sequence", 0)),
                   doc.get("topic_id"))

    def add_sync(self, source: int, remote: int) -> None:
        if not self.syncs or self.syncs[-1] != (source, remote):
            self.syncs.append((source, remote))
            del self.syncs[:-MAX_SYNCS]

    def note_foreign(self, remote_offset: int) -> None:
        """A record that is not this side's may sit in the remote at `remote_offset`."""
        if self.foreign_from < 0 or remote_offset < self.foreign_from:
            self.foreign_from = remote_offset

    def add_inbound(self, local_next: int, origin_next: int) -> None:
        if not self.inbound or self.inbound[-1][1] < origin_next:
            self.inbound.append((local_next, origin_next))
            del self.inbound[:-MAX_SYNCS]


def checkpoint_path(remote: str, topic: str, partition: int) -> str:
    return f"{REPLICATION_PATH}/{remote}/{topic}/{partition}"


class CheckpointStore:
    """Claim, read and advance one checkpoint node (see the module docstring)."""

    def __init__(self, store: MetadataStore, remote: str, topic: str, partition: int) -> None:
        self._store = store
        self._topic = topic
        self.path = checkpoint_path(remote, topic, partition)
        self._version = -1

    async def claim(self, topic_id: str | None = None) -> Checkpoint:
        """Read the checkpoint (a fresh one if none) and make it ours by a version bump, which
        stores it unsettled (this session may send); the checkpoint is returned as read.

        `topic_id`: the local topic's id.  A checkpoint kept for another topic of the same
        name (deleted, then created again) is replaced by a fresh one: resuming its position
        would skip the new topic's records below it, and its producer's sequence would not
        follow.  A node written before ids were kept is taken as this topic's."""
        while True:
            try:
                data, stat = await self._store.get(self.path)
            except NoNodeError:
                try:
                    await self._store.create(self.path, Checkpoint(topic_id=topic_id).to_bytes(),
                                             make_parents=True)
                except NodeExistsError:
                    pass
                continue
            checkpoint = Checkpoint.from_bytes(data)
            if topic_id is not None and checkpoint.topic_id not in (None, topic_id):
                log.warning("replication checkpoint %s was kept for an earlier topic of that "
                            "name (id %s); the topic now there (id %s) replicates from its "
                            "start", self.path, checkpoint.topic_id, topic_id)
                checkpoint = Checkpoint()
            checkpoint.topic_id = topic_id if topic_id is not None else checkpoint.topic_id
            claimed = Checkpoint.from_bytes(checkpoint.to_bytes())
            claimed.settled = False
            try:
                stat = await self._store.set(self.path, claimed.to_bytes(), stat.version)
            except BadVersionError:
                continue
            self._version = stat.version
            if topic_id is not None and not await topic_is_live(self._store, self._topic,
                                                                topic_id):
                await self._take_back()
                raise CheckpointLost(f"{self.path}: topic {self._topic} (id {topic_id}) is "
                                     "deleted")
            return checkpoint

    async def _take_back(self) -> None:
        """Remove the node this claim wrote (unless claimed since), and its parent if that is
        only a parent (no agreed configs: a topic created again under the name may have
        some) with nothing left under it."""
        try:
            await self._store.delete(self.path, self._version)
            parent = self.path.rpartition("/")[0]
            data, stat = await self._store.get(parent)
            if not data:
                await self._store.delete(parent, stat.version)
        except (BadVersionError, NotEmptyError, NoNodeError):
            pass

    async def save(self, checkpoint: Checkpoint) -> None:
        try:
            stat = await self._store.set(self.path, checkpoint.to_bytes(), self._version)
        except (BadVersionError, NoNodeError) as exc:
            raise CheckpointLost(f"{self.path} was claimed by another replicator") from exc
        self._version = stat.version


async def topic_is_live(store: MetadataStore, topic: str, topic_id: str) -> bool:
    """Has `topic` a node that is not being deleted, of the id `topic_id`?"""
    loaded = await TopicStore(store).read(topic)
    return loaded is not None and not loaded[1] and str(loaded[0].topic_id) == topic_id


async def read_checkpoint(store: MetadataStore, remote: str, topic: str,
                          partition: int) -> Checkpoint | None:
    try:
        data, _ = await store.get(checkpoint_path(remote, topic, partition))
    except NoNodeError:
        return None
    return Checkpoint.from_bytes(data)
