"""A partition's state node: the little a partition log keeps in the metadata store.

Besides its managed ledger, each partition has one JSON node (under
/ledgerwire/partition-state/<topic>/<partition>) holding the log start offset (DeleteRecords and
retention move it), the compaction point, and a producer-state snapshot with the offset it covers
(open transactions and the aborted-transactions index included).  Every write is a
compare-and-set on the node's version, one at a time: the owner claims the node on open by
writing it back unchanged (a deposed owner's next write then fails), and a write that loses its
CAS raises BadVersionError / NoNodeError, which the partition log takes to mean another broker
owns the partition now.

This module must never write the node without its version.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from ledger_backend.metadata.store import MetadataStore, NoNodeError
from protocols.kafka.errors import KafkaStorageError

STATE_FORMAT_VERSION = 1


class PartitionStateNode:
    """The state node at `path`: `claim()` (or `created()`) it, then read and `write` it."""

    def __init__(self, store: MetadataStore, path: str) -> None:
        self._store = store
        self.path = path
        self.values: dict[str, Any] = {}
        self._version = -1
        self._lock = trio.Lock()

    @staticmethod
    def initial() -> dict[str, Any]:
        """The state node of a partition that has never been written."""
        return {"format": STATE_FORMAT_VERSION, "log_start_offset": 0, "producer_snapshot": None}

    def created(self) -> None:
        """The node was created just now holding `initial()` (version 0): nobody to fence."""
        self.values, self._version = self.initial(), 0

    async def claim(self) -> dict[str, Any]:
        """Read the node and claim it by bumping its version (created if missing)."""
        try:
            data, stat = await self._store.get(self.path)
            state = json.loads(data)
            if state.get("format") != STATE_FORMAT_VERSION:
                raise KafkaStorageError(f"{self.path}: unknown format {state.get('format')}")
            # Claim the node: bump its version so a deposed owner's next CAS fails.
            claimed = await self._store.set(self.path, data, stat.version)
            self._version = claimed.version
        except NoNodeError:
            state = self.initial()
            await self._store.create(self.path, json.dumps(state).encode(), make_parents=True)
            self._version = 0
        self.values = state
        return state

    @property
    def writing(self) -> bool:
        return self._lock.locked()

    async def write(self, **changes: object) -> None:
        """CAS the node with `changes` applied; BadVersionError / NoNodeError: another owner."""
        async with self._lock:
            state = dict(self.values)
            state.update(changes)
            stat = await self._store.set(self.path, json.dumps(state).encode(), self._version)
            self.values = state
            self._version = stat.version
