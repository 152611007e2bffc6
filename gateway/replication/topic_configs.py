"""Topic configs that follow a replicated topic to the remote: what to push, and what both agreed.

The replicator creates the remote topic with this side's configs; later changes are pushed by
the replication service as IncrementalAlterConfigs.  Both sides of an active-active pair push,
so a change that arrived from the remote must not be pushed back, and two different changes
made on both sides at once must settle on one value.  Each side keeps, per remote and topic,
the configs both had when they last agreed (`agreed`, stored in the metadata store beside the
partitions' checkpoints, /ledgerwire/replication/<remote>/<topic>), and for each key:

- here == there: agreed (nothing to do);
- here == agreed: unchanged here, so the difference is the remote's to push;
- changed here and not there (there == agreed): push;
- changed on both sides (or here after the remote's change arrived but before this side
  looked): the cluster whose name sorts first pushes; the other takes the remote's value as
  agreed, so that if its own value is still there at its next look, it is pushed as the later
  change;
- otherwise both sides may see the difference as the other's to push (a value changed back to
  what a side last agreed on before it saw the remote's change): after `STUCK_LOOKS` looks in a
  row finding the same key so, the first-named side pushes its value.

What this cannot see: a key that arrives from the remote and is changed back here to the value
this side last agreed on, before this side looked (a look is every ~0.5 s), looks unchanged
here; the stuck rule then settles it on the first-named side's value.

So every change crosses once and never comes back, and two sides always end with one value:
the remote's change and a later one here settle on the later one; two changes made at once
settle on the first-named side's, unless both sides' pushes cross each other on the wire (each
side looks at a jittered interval, so that does not repeat).

`config_changes` is sans-IO; the store helpers must never write anything but the agreed map.
"""

from __future__ import annotations

import json

from gateway.replication.checkpoints import REPLICATION_PATH, topic_is_live
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NoNodeError,
    NotEmptyError,
)

AGREED_FORMAT_VERSION = 1
STUCK_LOOKS = 12  # ~6 s of looks: far more than the other side needs to push its own change


def config_changes(here: dict[str, str], agreed: dict[str, str], there: dict[str, str],
                   here_wins: bool, stuck: dict[str, int] | None = None
                   ) -> tuple[dict[str, str | None], dict[str, str]]:
    """(changes to push: key -> value, None removes it; the agreed map after they are made).
    `stuck` (key -> looks in a row it differed with neither side changed) is updated."""
    push: dict[str, str | None] = {}
    now_agreed = dict(agreed)
    stuck_before = dict(stuck or {})
    if stuck is not None:
        stuck.clear()
    for key in sorted(set(here) | set(agreed) | set(there)):
        mine, before, theirs = here.get(key), agreed.get(key), there.get(key)
        if mine != theirs and mine == before:
            looks = stuck_before.get(key, 0) + 1
            if not (here_wins and looks >= STUCK_LOOKS):
                if stuck is not None:
                    stuck[key] = looks
                continue  # the remote's change, for it to push
            push[key] = mine
        elif mine != theirs and (theirs == before or here_wins):
            push[key] = mine
        elif mine != theirs:  # both changed and the remote wins: theirs is the new base
            mine = theirs
        if mine is None:
            now_agreed.pop(key, None)
        else:
            now_agreed[key] = mine
    return push, now_agreed


def agreed_path(remote: str, topic: str) -> str:
    return f"{REPLICATION_PATH}/{remote}/{topic}"


async def read_agreed(store: MetadataStore, remote: str, topic: str) -> dict[str, str]:
    """The configs both sides last agreed on ({} before the first agreement)."""
    try:
        data, _ = await store.get(agreed_path(remote, topic))
    except NoNodeError:
        return {}
    if not data:  # the node exists as the parent of the partitions' checkpoints
        return {}
    doc = json.loads(data)
    if doc.get("format") != AGREED_FORMAT_VERSION:
        raise ValueError(f"unknown replicated-configs format {doc.get('format')}")
    return {str(k): str(v) for k, v in doc.get("configs", {}).items()}


async def save_agreed(store: MetadataStore, remote: str, topic: str,
                      agreed: dict[str, str], topic_id: str | None = None) -> None:
    """Store the configs agreed with `remote`.  The node is created if missing; `topic_id`
    given, one created for a topic deleted meanwhile (or created again) is taken back, as a
    checkpoint's claim is (checkpoints.py): the deletion wins."""
    data = json.dumps({"format": AGREED_FORMAT_VERSION, "configs": agreed},
                      sort_keys=True).encode()
    path = agreed_path(remote, topic)
    try:
        await store.set(path, data, -1)
        return
    except NoNodeError:
        await store.create(path, data, make_parents=True)
    if topic_id is not None and not await topic_is_live(store, topic, topic_id):
        try:
            await store.delete(path, 0)  # as created, with no checkpoint under it
        except (BadVersionError, NotEmptyError, NoNodeError):
            pass  # written or claimed under since: whoever did that decides
