"""What replication keeps in the metadata store for a topic, collected when the topic goes.

Per remote cluster and topic, replication keeps

    /ledgerwire/replication/<remote>/<topic>               the configs both sides last agreed
    /ledgerwire/replication/<remote>/<topic>/<partition>   each partition's checkpoint

and the topic's name in the paused list (/ledgerwire/replication-paused).  None of it means
anything once the topic is deleted: a topic created again under the name starts afresh (as a
Pulsar topic's policies and its replicators' cursors go with the topic).  A run that creates
and deletes thousands of topics would otherwise leave thousands of nodes behind for good.

`collect_topic` removes them when the topic service deletes the topic; `collect_orphans`, at
the replication service's start, removes those whose topic has no node any more (a deletion
interrupted by a crash, one made by a process whose replication service was not running, or
records left by code from before this module).

Both must never remove the checkpoint of a topic that exists, a replicator's claim included:
a checkpoint is removed only at the version read, after its topic id was found not to be the
live topic's (a version bump meanwhile, a replicator claiming or saving it, is looked at
again: a claim for a topic created again under the name carries the new id and stays), and a
topic's agreed-configs node only once it has no checkpoint left under it.  A replicator that
claims after the collection takes its node back itself (checkpoints.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.replication.checkpoints import REPLICATION_PATH, Checkpoint
from gateway.replication.paused_topics import paused_topics, write_paused
from gateway.topics.topic_store import TopicStore
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NoNodeError,
    NotEmptyError,
)

log = logging.getLogger("ledgerwire.replication")

# topic id a checkpoint was written for (None: before ids were kept) -> it is still the live
# topic's and must stay
StillLive = Callable[[str | None], Awaitable[bool]]


async def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return await store.children(path)
    except NoNodeError:
        return []


async def _collect_checkpoint(store: MetadataStore, path: str, still_live: StillLive) -> int:
    """Remove the checkpoint at `path` unless `still_live` keeps it; 1 if removed.  A version
    bump meanwhile (a replicator of the topic saving, or claiming) is looked at again: the
    deletion must win over the deleted topic's replicators (checkpoints.py)."""
    while True:
        try:
            data, stat = await store.get(path)
        except NoNodeError:
            return 0
        try:
            topic_id = Checkpoint.from_bytes(data).topic_id
        except ValueError:  # a format this code does not know (newer code): not ours to judge
            return 0
        if await still_live(topic_id):
            return 0
        try:
            await store.delete(path, stat.version)
            return 1
        except BadVersionError:
            continue
        except NoNodeError:
            return 0


async def _collect_under(store: MetadataStore, remote: str, topic: str,
                         still_live: StillLive) -> int:
    """Remove the topic's checkpoints toward `remote` that `still_live` does not keep, then
    its agreed configs if no checkpoint is left; the number of nodes removed."""
    base = f"{REPLICATION_PATH}/{remote}/{topic}"
    removed = 0
    for partition in await _children(store, base):
        removed += await _collect_checkpoint(store, f"{base}/{partition}", still_live)
    try:
        await store.delete(base)
        removed += 1
    except (NotEmptyError, NoNodeError):
        pass
    return removed


async def collect_topic(store: MetadataStore, topic: str, topic_id: str) -> int:
    """Remove what replication keeps for the topic `topic_id` (being deleted): its checkpoints
    toward every remote, the configs agreed with them, and its place in the paused list.
    Checkpoints kept for another topic of the name (created since) stay.  Returns the number
    of nodes removed (the paused list counts as one when it changed)."""
    async def still_live(checkpoint_id: str | None) -> bool:
        return checkpoint_id is not None and checkpoint_id != topic_id

    removed = 0
    for remote in await _children(store, REPLICATION_PATH):
        removed += await _collect_under(store, remote, topic, still_live)
    if topic in await paused_topics(store):
        await write_paused(store, topic, False)
        removed += 1
    return removed


async def collect_orphans(store: MetadataStore) -> int:
    """Remove what replication keeps for topics that have no node (or a deleting one), as
    collect_topic would have; the number of nodes removed."""
    topics = TopicStore(store)

    def live_check(topic: str) -> StillLive:
        async def still_live(checkpoint_id: str | None) -> bool:
            loaded = await topics.read(topic)  # read after the checkpoint: see the docstring
            if loaded is None or loaded[1]:
                return False
            return checkpoint_id is None or checkpoint_id == str(loaded[0].topic_id)
        return still_live

    removed = 0
    for remote in await _children(store, REPLICATION_PATH):
        for topic in await _children(store, f"{REPLICATION_PATH}/{remote}"):
            loaded = await topics.read(topic)
            if loaded is not None and not loaded[1]:
                continue  # a live topic: its claim replaces a checkpoint of another id
            removed += await _collect_under(store, remote, topic, live_check(topic))
    for topic in await paused_topics(store):
        loaded = await topics.read(topic)
        if loaded is None or loaded[1]:
            await write_paused(store, topic, False)
            removed += 1
    if removed:
        log.info("replication: collected %d records of deleted topics", removed)
    return removed
