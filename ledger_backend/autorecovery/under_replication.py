"""Where auto-recovery keeps its state in the metadata store, and the per-ledger lock.

    /ledgerwire/autorecovery/election/candidate-<seq>   ephemeral sequential: auditor election
    /ledgerwire/autorecovery/underreplicated/<ledger>   persistent JSON {"lost": [...], "since_ms"}
    /ledgerwire/autorecovery/locks/<ledger>             ephemeral: a worker is replicating it
    /ledgerwire/autorecovery/disabled                   present: auditors and workers pause

A ledger node name is the ledger id zero-padded like ledger_metadata.ledger_path.  A lock is an
ephemeral node so that a worker that dies releases its ledgers with its session.

This module must never delete an under-replication mark that it did not see resolved.
"""

from __future__ import annotations

import json
import time

from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError

ROOT = "/ledgerwire/autorecovery"
ELECTION_PATH = f"{ROOT}/election"
UNDERREPLICATED_PATH = f"{ROOT}/underreplicated"
LOCKS_PATH = f"{ROOT}/locks"
DISABLED_PATH = f"{ROOT}/disabled"
_DIGITS = 20


def ledger_node(ledger_id: int) -> str:
    return f"{ledger_id:0{_DIGITS}d}"


async def ensure_layout(store: MetadataStore) -> None:
    for path in (ELECTION_PATH, UNDERREPLICATED_PATH, LOCKS_PATH):
        try:
            await store.create(path, b"", make_parents=True)
        except NodeExistsError:
            pass


async def mark_underreplicated(store: MetadataStore, ledger_id: int, lost: set[str]) -> bool:
    """Create the mark (True) or merge `lost` into an existing one (False)."""
    path = f"{UNDERREPLICATED_PATH}/{ledger_node(ledger_id)}"
    doc = {"lost": sorted(lost), "since_ms": int(time.time() * 1000)}
    try:
        await store.create(path, json.dumps(doc).encode(), make_parents=True)
        return True
    except NodeExistsError:
        pass
    try:
        data, stat = await store.get(path)
    except NoNodeError:
        return await mark_underreplicated(store, ledger_id, lost)
    current = json.loads(data)
    merged = set(current.get("lost", [])) | lost
    if merged != set(current.get("lost", [])):
        current["lost"] = sorted(merged)
        await store.set(path, json.dumps(current).encode(), stat.version)
    return False


async def list_underreplicated(store: MetadataStore) -> list[int]:
    try:
        names = await store.children(UNDERREPLICATED_PATH)
    except NoNodeError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


async def read_mark(store: MetadataStore, ledger_id: int) -> tuple[dict, int] | None:
    try:
        data, stat = await store.get(f"{UNDERREPLICATED_PATH}/{ledger_node(ledger_id)}")
    except NoNodeError:
        return None
    return json.loads(data), stat.version


async def clear_mark(store: MetadataStore, ledger_id: int, version: int) -> None:
    """Remove the mark if nobody added lost bookies to it since `version` was read."""
    try:
        await store.delete(f"{UNDERREPLICATED_PATH}/{ledger_node(ledger_id)}", version)
    except NoNodeError:
        pass


async def try_lock(store: MetadataStore, ledger_id: int) -> bool:
    try:
        await store.create(f"{LOCKS_PATH}/{ledger_node(ledger_id)}", b"", ephemeral=True,
                           make_parents=True)
        return True
    except NodeExistsError:
        return False


async def unlock(store: MetadataStore, ledger_id: int) -> None:
    try:
        await store.delete(f"{LOCKS_PATH}/{ledger_node(ledger_id)}")
    except NoNodeError:
        pass


async def is_disabled(store: MetadataStore) -> bool:
    return await store.exists(DISABLED_PATH) is not None
