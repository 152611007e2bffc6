"""A topic's node in the metadata store, for tests whose topic service is a stand-in.

Replication's checkpoint claims read the topic's node (a claim for a topic that is deleting,
gone or of another id is taken back: gateway/replication/checkpoints.py), so a test that
drives a replicator against a stand-in topic service writes the node the real one would.
"""

from __future__ import annotations

import uuid

from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_store import TopicStore
from ledger_backend.metadata import MetadataStore


async def write_topic_node(store: MetadataStore, name: str, topic_id: uuid.UUID,
                           partitions: int = 1) -> None:
    """Create `name`'s node with `topic_id`, or give the existing node that id."""
    topics = TopicStore(store)
    info = TopicInfo(name, topic_id, partitions, {})
    loaded = await topics.read(name)
    if loaded is None:
        await topics.create(info)
    else:
        await topics.write(info, loaded[2])
