"""The durable form of one topic partition's delivery state: every group's `DeliveryPartition`
in one compacted log (a managed ledger), as Kafka keeps share-partition state in
`__share_group_state` — snapshots plus updates.

Records (JSON, format version `v`):
  {"v": 1, "type": "update", "g": group, "d": delta}       one group's `take_delta()`
  {"v": 1, "type": "forget", "g": group}                   the group's state is dropped
  {"v": 1, "type": "snapshot", "groups": {group: snapshot}} every group's whole state

The log lives with the topic partition: whoever owns the partition opens (and so fences) the
log, so a deposed owner can never persist another change.  Records are applied to the live
state only while replaying at load; afterwards the live state is always ahead of (or equal to)
the log, and `persist` writes what changed.

This module must never let a caller reveal a change before `persist` returned, and never
decide delivery itself (that is `delivery_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from gateway.coordinator.compacted_log import CompactedLog
from gateway.delivery.delivery_state import DeliveryPartition, DeliverySettings
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory

FORMAT_VERSION: Final = 1
SettingsFor = Callable[[str], DeliverySettings]


STATE_LEDGER_PREFIX: Final = "__system/delivery/"


def state_ledger_name(topic: str, partition: int, prefix: str = STATE_LEDGER_PREFIX) -> str:
    return f"{prefix}{topic}-{partition}"


class DeliveryStateLog(CompactedLog):
    """Every group's delivery state of one topic partition, persisted."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None,
        *,
        ledger_name: str,
        settings_for: SettingsFor,
        snapshot_every: int = 1_000,
    ) -> None:
        super().__init__(factory, config, ledger_name=ledger_name, snapshot_every=snapshot_every)
        self._settings_for = settings_for
        self.groups: dict[str, DeliveryPartition] = {}
        self._replaying = False

    async def load(self) -> dict[str, DeliveryPartition]:
        """Open the log (fencing any earlier writer) and rebuild every group's state."""
        self._replaying = True
        try:
            await self._replay()
        finally:
            self._replaying = False
        return self.groups

    async def persist(self, group: str) -> bool:
        """Make `group`'s changes since the last call durable; False when there were none."""
        partition = self.groups.get(group)
        delta = partition.take_delta() if partition is not None else None
        if delta is None:
            return False
        await self._append({"v": FORMAT_VERSION, "type": "update", "g": group, "d": delta})
        return True

    async def forget(self, group: str) -> None:
        """Drop `group`'s state, durably."""
        self.groups.pop(group, None)
        await self._append({"v": FORMAT_VERSION, "type": "forget", "g": group})

    def _apply(self, record: dict[str, Any]) -> None:
        if not self._replaying:
            return  # the live state already holds what the record says (module docstring)
        if record.get("v") != FORMAT_VERSION:
            raise ValueError(f"unknown delivery-state record format {record.get('v')!r}")
        kind = record.get("type")
        if kind == "snapshot":
            self.groups = {
                group: DeliveryPartition.from_snapshot(data, self._settings_for(group))
                for group, data in record["groups"].items()
            }
        elif kind == "update":
            group = record["g"]
            partition = self.groups.get(group)
            if partition is None:
                partition = DeliveryPartition.from_snapshot(record["d"], self._settings_for(group))
                self.groups[group] = partition
            else:
                partition.apply_delta(record["d"])
            partition.take_delta()  # replayed state is persisted state
        elif kind == "forget":
            self.groups.pop(record["g"], None)
        else:
            raise ValueError(f"unknown delivery-state record type {kind!r}")

    def _snapshot_record(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "type": "snapshot",
            "groups": {group: p.snapshot() for group, p in self.groups.items()},
        }
