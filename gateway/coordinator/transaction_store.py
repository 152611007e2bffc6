"""Transaction coordinator state, kept durably in a managed ledger of the ledger backend.

Why a log and not metadata nodes: every transaction changes its state at least three times
(Ongoing, Prepare*, Complete*) and again for each new partition, so the write rate follows the
transaction rate of every producer — data traffic, which a ledger append (one fsynced quorum
write) carries well and a metadata-store CAS per change would not.  This is Kafka's
`__transaction_state` design: the ledger `__transaction_state` holds one record with the whole
metadata of one transactional id per change (a later record for an id replaces the earlier
one), or its deletion; every `snapshot_every` records a snapshot record with the whole state is
appended, the cursor "snapshot" moves to it and the ledgers before it are deleted — a compacted
log (gateway/coordinator/compacted_log.py) with bounded replay at start.

Record format: a JSON object with a format version `v` and a `type` (txn, delete, snapshot).
This module must never acknowledge a write before its record is durable, and never interpret
the transaction records (they belong to protocols.kafka.transaction_coordinator) beyond their
update time, which `adopt` compares.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from gateway.coordinator.compacted_log import CompactedLog
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory

log = logging.getLogger("ledgerwire.transactions.store")

FORMAT_VERSION = 1
TRANSACTION_STATE_LEDGER = "__system/transactions/__transaction_state"


def transaction_ledger_name(partition: int) -> str:
    """Transaction partition i's state ledger (a cluster's and every standalone's;
    TRANSACTION_STATE_LEDGER alone is the one-ledger layout of data directories from before,
    moved into these at start: single_ledger_migration.py)."""
    return f"{TRANSACTION_STATE_LEDGER}-{partition}"


def _updated_ms(record: dict[str, Any]) -> int:
    """When a transaction record was last changed (its coordinator's clock; 0: not said)."""
    stamp = record.get("update_ms", 0)
    return stamp if isinstance(stamp, int) else 0


class LedgerTransactionStore(CompactedLog):
    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None = None,
        *,
        ledger_name: str = TRANSACTION_STATE_LEDGER,
        snapshot_every: int = 10_000,
    ) -> None:
        super().__init__(factory, config, ledger_name=ledger_name, snapshot_every=snapshot_every)
        self._state: dict[str, dict[str, Any]] = {}

    async def load(self) -> dict[str, dict[str, Any]]:
        replayed = await self._replay()
        log.info("transaction state loaded",
                 extra={"transactional_ids": len(self._state), "records_replayed": replayed})
        return dict(self._state)

    def _apply(self, record: dict[str, Any]) -> None:
        if record.get("v") != FORMAT_VERSION:
            raise ValueError(f"transaction log record of unknown version {record.get('v')!r}")
        kind = record["type"]
        if kind == "txn":
            self._state[record["id"]] = record["txn"]
        elif kind == "delete":
            self._state.pop(record["id"], None)
        elif kind == "snapshot":
            self._state = dict(record["txns"])
        else:
            raise ValueError(f"transaction log record of unknown type {kind!r}")

    def _snapshot_record(self) -> dict[str, Any]:
        return {"v": FORMAT_VERSION, "type": "snapshot", "txns": self._state}

    async def write(self, transactional_id: str, record: dict[str, Any]) -> None:
        await self._append({"v": FORMAT_VERSION, "type": "txn", "id": transactional_id,
                            "txn": record})

    async def adopt(self, other: LedgerTransactionStore,
                    transactional_ids: Iterable[str]) -> None:
        """Take these ids' state from `other` (loaded) over what this log holds for them,
        made durable as ONE snapshot record: doing it again after a crash changes nothing
        (single_ledger_migration.py).  An id this log holds with a later update stays (a data
        directory run in both shapes by an older version): taking the older state would drop
        a newer producer id and any transaction it has open, whose partitions would then
        never get their abort marker (last stable offset stuck)."""
        for transactional_id in transactional_ids:
            if transactional_id in other._state:
                theirs = other._state[transactional_id]
                held = self._state.get(transactional_id)
                if held is None or _updated_ms(held) <= _updated_ms(theirs):
                    self._state[transactional_id] = theirs
        await self.snapshot()

    async def delete(self, transactional_id: str) -> None:
        await self._append({"v": FORMAT_VERSION, "type": "delete", "id": transactional_id})
