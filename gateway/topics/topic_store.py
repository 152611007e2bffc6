"""Where the topic catalogue lives in the metadata store, and every read and write of it.

A topic is the node /ledgerwire/topics/<name> holding its record (topic_node.py); the state
nodes of its partitions (log start offset, producer snapshot: partition_state.py) sit under
/ledgerwire/partition-state/<name>/<p>.  Creating a topic writes its node and the parent of its
state nodes in one multi, so the first open of each partition writes only its own nodes; a
topic whose parent was not made that way has it checked (and created) once, by the first of its
partitions to open, while the others wait for that one check.

Changes go by compare-and-set on the node's version (`write`); the topic service decides what
to write (topic_service.py).  This module must never change a topic node without a version
check, and never hold a topic in memory: it keeps only which state parents exist.
"""

from __future__ import annotations

import trio

from gateway.topics.topic_node import TopicInfo, decode_topic, encode_topic
from ledger_backend.metadata.store import CreateOp, MetadataStore, NodeExistsError, NoNodeError

TOPICS_PATH = "/ledgerwire/topics"
PARTITION_STATE_PATH = "/ledgerwire/partition-state"


class TopicStore:
    """The topic nodes and partition-state parents of one metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._state_dirs: set[str] = set()  # topics whose partition-state parent exists
        self._roots_exist = False  # the parents of topic nodes and partition-state parents
        self._state_dir_locks: dict[str, trio.Lock] = {}

    async def names(self) -> list[str]:
        """Every topic with a node (deleting ones too)."""
        try:
            return await self._store.children(TOPICS_PATH)
        except NoNodeError:
            return []

    async def read(self, name: str) -> tuple[TopicInfo, bool, int] | None:
        """(record, deleting, version) of the topic's node; None if there is none."""
        try:
            data, stat = await self._store.get(f"{TOPICS_PATH}/{name}")
        except NoNodeError:
            return None
        info, deleting = decode_topic(name, data)
        return info, deleting, stat.version

    async def create(self, info: TopicInfo) -> None:
        """The topic's node and the parent of its partition state nodes, in one multi: the
        first open of each partition then writes only its own nodes (the parent was checked,
        and created, by the first partition of the topic to open: a write, and its
        partitions queued behind it, per topic).  NodeExistsError if the topic exists."""
        name = info.name
        if not self._roots_exist:
            for root in (TOPICS_PATH, PARTITION_STATE_PATH):
                if await self._store.exists(root) is None:
                    try:
                        await self._store.create(root, b"", make_parents=True)
                    except NodeExistsError:
                        pass
            self._roots_exist = True  # (never deleted; a refused multi looks again)
        try:
            await self._store.multi([CreateOp(f"{TOPICS_PATH}/{name}", encode_topic(info)),
                                     CreateOp(f"{PARTITION_STATE_PATH}/{name}", b"")])
        except (NodeExistsError, NoNodeError):
            # the topic exists, a root went (tests), or a parent was left by an earlier topic
            # of the name: the topic's node alone, as before (its first open checks the parent)
            self._roots_exist = False
            await self._store.create(f"{TOPICS_PATH}/{name}", encode_topic(info),
                                     make_parents=True)
            return
        self._state_dirs.add(name)

    async def write(self, info: TopicInfo, version: int, *, deleting: bool = False) -> int:
        """Replace the record if the node is still at `version` (BadVersionError if not);
        returns the new version."""
        stat = await self._store.set(f"{TOPICS_PATH}/{info.name}",
                                     encode_topic(info, deleting), version)
        return stat.version

    async def delete(self, name: str, version: int) -> None:
        """The partitions' state nodes, then the topic's node (gone already: fine)."""
        self._state_dirs.discard(name)
        try:
            await self._store.delete(f"{PARTITION_STATE_PATH}/{name}", recursive=True)
        except NoNodeError:
            pass
        try:
            await self._store.delete(f"{TOPICS_PATH}/{name}", version)
        except NoNodeError:
            pass

    def state_path(self, topic: str, partition: int) -> str:
        return f"{PARTITION_STATE_PATH}/{topic}/{partition}"

    def forget_state_dir(self, topic: str) -> None:
        """Check the topic's state parent again at its next open (it may have been deleted)."""
        self._state_dirs.discard(topic)

    async def ensure_state_dir(self, topic: str) -> None:
        """The parent of the topic's partition state nodes exists (checked once a topic)."""
        if topic in self._state_dirs:
            return
        # one check for the partitions of a topic opening together (a produce request to all
        # of a new topic's partitions checked and created it once per partition)
        lock = self._state_dir_locks.setdefault(topic, trio.Lock())
        try:
            async with lock:
                if topic in self._state_dirs:
                    return
                parent = f"{PARTITION_STATE_PATH}/{topic}"
                if await self._store.exists(parent) is None:
                    try:
                        await self._store.create(parent, b"", make_parents=True)
                    except NodeExistsError:
                        pass
                self._state_dirs.add(topic)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._state_dir_locks.pop(topic, None)
