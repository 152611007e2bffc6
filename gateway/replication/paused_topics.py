"""Topics whose replication an operator paused, kept in the metadata store.

    /ledgerwire/replication-paused   {"format": 1, "topics": ["name", ...]}

`ledgerwire admin replication pause|resume TOPIC` reach it through the admin API; every
process's replication service reads it on each scan, so a pause holds across restarts and on
every broker.  A paused topic's replicators are stopped (what they had acknowledged stays
checkpointed; the backlog grows and still shows) and start again from their checkpoints on
resume, so pausing never loses or duplicates a message.

This module must never change the node without a version check.
"""

from __future__ import annotations

import json

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

PAUSED_PATH = "/ledgerwire/replication-paused"
PAUSED_FORMAT_VERSION = 1


async def paused_topics(store: MetadataStore) -> set[str]:
    try:
        data, _ = await store.get(PAUSED_PATH)
    except NoNodeError:
        return set()
    return _decode(data)


def _decode(data: bytes) -> set[str]:
    doc = json.loads(data)
    if doc.get("format") != PAUSED_FORMAT_VERSION:
        raise ValueError(f"unknown paused-topics format {doc.get('format')}")
    return {str(t) for t in doc.get("topics", [])}


async def write_paused(store: MetadataStore, topic: str, paused: bool) -> set[str]:
    """Pause (or resume) the topic's replication; the paused topics after the change."""
    while True:
        try:
            data, stat = await store.get(PAUSED_PATH)
        except NoNodeError:
            data, version = b"", None
        else:
            version = stat.version
        topics = _decode(data) if data else set()
        topics = topics | {topic} if paused else topics - {topic}
        encoded = json.dumps({"format": PAUSED_FORMAT_VERSION,
                              "topics": sorted(topics)}).encode()
        try:
            if version is None:
                await store.create(PAUSED_PATH, encoded, make_parents=True)
            else:
                await store.set(PAUSED_PATH, encoded, version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another change came first: apply this one to it
        return topics
