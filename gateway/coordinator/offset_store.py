"""Committed consumer-group offsets, kept durably in a managed ledger of the ledger backend.

Why a log and not metadata nodes: commits are frequent (every consumer, every few seconds),
and a ledger append is one fsynced quorum write, where a metadata CAS per group would load the
metadata store with data traffic. The ledger `__consumer_offsets` holds one record per commit
(or deletion); every `snapshot_every` records a snapshot record with the whole state is
appended, a cursor named "snapshot" is moved to it, and the ledgers before it are deleted —
a compacted log (gateway/coordinator/compacted_log.py) in the spirit of Kafka's
`__consumer_offsets`.

Record format: a JSON object with a format version `v` and a `type` (commit, delete, group,
snapshot). A `group` record holds one group's metadata (`metadata`: the coordinator's record,
opaque here and versioned by `protocols/kafka/group_records.py`, which says when it is written
and how it is loaded; null once the group is gone); the latest per group id is kept, and a
snapshot carries all of them (`group_metadata`) beside the offsets, so compaction keeps
exactly the live groups. Deleting a group's offsets leaves its metadata alone. A snapshot
without `group_metadata` (written before groups were durable) loads with none.

This module must never acknowledge a commit or a group change before its record is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.coordinator.compacted_log import CompactedLog
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey

log = logging.getLogger("ledgerwire.offsets")

FORMAT_VERSION = 1
KAFKA_OFFSETS_LEDGER = "__system/offsets/__consumer_offsets"
State = dict[str, dict[OffsetKey, CommittedOffset]]


def group_ledger_name(partition: int) -> str:
    """Coordinator partition i's offsets ledger (a cluster's and every standalone's;
    KAFKA_OFFSETS_LEDGER alone is the one-ledger layout of data directories from before,
    moved into these at start: single_ledger_migration.py)."""
    return f"{KAFKA_OFFSETS_LEDGER}-{partition}"


def _encode_offsets(offsets: Mapping[OffsetKey, CommittedOffset]) -> list[list[Any]]:
    return [
        [topic, partition, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms]
        for (topic, partition), o in offsets.items()
    ]


def _decode_offsets(rows: list[list[Any]]) -> dict[OffsetKey, CommittedOffset]:
    return {(t, p): CommittedOffset(off, epoch, meta, ts) for t, p, off, epoch, meta, ts in rows}


class LedgerOffsetStore(CompactedLog):
    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None = None,
        *,
        ledger_name: str = KAFKA_OFFSETS_LEDGER,
        snapshot_every: int = 10_000,
    ) -> None:
        super().__init__(factory, config, ledger_name=ledger_name, snapshot_every=snapshot_every)
        self._state: State = {}
        self._group_metadata: dict[str, dict[str, Any]] = {}

    async def load(self) -> State:
        replayed = await self._replay()
        log.info("committed offsets loaded",
                 extra={"groups": len(self._state), "records_replayed": replayed})
        return {group: dict(offsets) for group, offsets in self._state.items()}

    async def load_groups(self) -> dict[str, dict[str, Any]]:
        """The latest metadata record of every group (after `load`)."""
        return dict(self._group_metadata)

    def _apply(self, record: dict[str, Any]) -> None:
        if record.get("v") != FORMAT_VERSION:
            raise ValueError(f"offset record of unknown format version {record.get('v')!r}")
        kind = record["type"]
        if kind == "snapshot":
            self._state = {g: _decode_offsets(rows) for g, rows in record["groups"].items()}
            self._group_metadata = dict(record.get("group_metadata") or {})
        elif kind == "group":
            if record["metadata"] is None:
                self._group_metadata.pop(record["group"], None)
            else:
                self._group_metadata[record["group"]] = record["metadata"]
        elif kind == "commit":
            self._state.setdefault(record["group"], {}).update(_decode_offsets(record["offsets"]))
        elif kind == "delete":
            group = record["group"]
            if record["keys"] is None:
                self._state.pop(group, None)
            else:
                for topic, partition in record["keys"]:
                    self._state.get(group, {}).pop((topic, partition), None)
        else:
            raise ValueError(f"offset record of unknown type {kind!r}")

    def _snapshot_record(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "type": "snapshot",
            "groups": {g: _encode_offsets(o) for g, o in self._state.items()},
            "group_metadata": self._group_metadata,
        }

    async def commit(self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        await self._append(
            {"v": FORMAT_VERSION, "type": "commit", "group": group_id,
             "offsets": _encode_offsets(offsets)}
        )

    async def store_group(self, group_id: str, record: dict[str, Any] | None) -> None:
        """Make one group's metadata record (None: the group is gone) durable."""
        await self._append(
            {"v": FORMAT_VERSION, "type": "group", "group": group_id, "metadata": record})

    async def adopt(self, other: LedgerOffsetStore, group_ids: Iterable[str]) -> None:
        """Take these groups' offsets and metadata from `other` (loaded) over what this log
        holds for them, made durable as ONE snapshot record: doing it again after a crash
        changes nothing (single_ledger_migration.py)."""
        ids = set(group_ids)
        await self.take({g: rows for g, rows in other._state.items() if g in ids},
                        {g: meta for g, meta in other._group_metadata.items() if g in ids})

    async def take(self, offsets: State,
                   group_metadata: Mapping[str, dict[str, Any]] | None = None) -> None:
        """Set these offsets (and group records) over what this log holds for the same keys,
        made durable as ONE snapshot record (so taking them again changes nothing).  An offset
        this log holds with a later commit time stays: a data directory run in both shapes by
        an older version has each key's latest commit on either side, and taking the older
        one would move its group back (records delivered again)."""
        for group_id, rows in offsets.items():
            mine = self._state.setdefault(group_id, {})
            for key, offset in rows.items():
                held = mine.get(key)
                if held is None or held.commit_timestamp_ms <= offset.commit_timestamp_ms:
                    mine[key] = offset
        self._group_metadata.update(group_metadata or {})
        await self.snapshot()

    async def delete(self, group_id: str, keys: list[OffsetKey] | None) -> None:
        await self._append(
            {"v": FORMAT_VERSION, "type": "delete", "group": group_id,
             "keys": None if keys is None else [list(k) for k in keys]}
        )
