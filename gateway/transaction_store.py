"""Transaction coordinator state, kept durably in a managed ledger of the ledger backend.

Why a log and not metadata nodes: every transaction changes its state at least three times
(Ongoing, Prepare*, Complete*) and again for each new partition, so the write rate follows the
transaction rate of every producer — data traffic, which a ledger append (one fsynced quorum
write) carries well and a metadata-store CAS per change would not.  This is Kafka's
`__transaction_state` design: the ledger `__transaction_state` holds one record with the whole
metadata of one transactional id per change (a later record for an id replaces the earlier
one), or its deletion; every `snapshot_every` records a snapshot record with the whole state is
appended, the cursor "snapshot" moves to it and the ledgers before it are deleted — a compacted
log with bounded replay at start.

Record format: a JSON object with a format version `v` and a `type` (txn, delete, snapshot).
This module must never acknowledge a write before its record is durable, and never interpret
the transaction records: they belong to protocols.kafka.transaction_coordinator.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ledger_backend.managed_ledger import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
)

log = logging.getLogger("ledgerwire.transactions.store")

FORMAT_VERSION = 1
TRANSACTION_STATE_LEDGER = "__system/transactions/__transaction_state"


class LedgerTransactionStore:
    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None = None,
        *,
        ledger_name: str = TRANSACTION_STATE_LEDGER,
        snapshot_every: int = 10_000,
    ) -> None:
        self._factory = factory
        self._config = config
        self._ledger_name = ledger_name
        self._snapshot_every = snapshot_every
        self._ledger: ManagedLedger | None = None
        self._state: dict[str, dict[str, Any]] = {}
        self._records_since_snapshot = 0

    async def load(self) -> dict[str, dict[str, Any]]:
        self._ledger = await self._factory.open(self._ledger_name, self._config)
        cursor = await self._ledger.open_cursor("snapshot")
        position: Position | None = cursor.mark_delete_position or self._ledger.first_position
        replayed = 0
        while position is not None:
            entries = await self._ledger.read(position, 1000)
            if not entries:
                break
            for entry in entries:
                self._apply(json.loads(entry.data))
                replayed += 1
            position = self._ledger.next_position(entries[-1].position)
        self._records_since_snapshot = replayed
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

    async def _append(self, record: dict[str, Any]) -> None:
        assert self._ledger is not None, "load() first"
        await self._ledger.append(json.dumps(record, separators=(",", ":")).encode())
        self._apply(record)
        self._records_since_snapshot += 1
        if self._records_since_snapshot >= self._snapshot_every:
            await self.snapshot()

    async def write(self, transactional_id: str, record: dict[str, Any]) -> None:
        await self._append({"v": FORMAT_VERSION, "type": "txn", "id": transactional_id,
                            "txn": record})

    async def delete(self, transactional_id: str) -> None:
        await self._append({"v": FORMAT_VERSION, "type": "delete", "id": transactional_id})

    async def snapshot(self) -> None:
        """Write the whole state as one record, then drop the ledgers it makes redundant."""
        assert self._ledger is not None
        record = {"v": FORMAT_VERSION, "type": "snapshot", "txns": self._state}
        position = await self._ledger.append(json.dumps(record, separators=(",", ":")).encode())
        self._records_since_snapshot = 0
        cursor = await self._ledger.open_cursor("snapshot")
        await cursor.mark_delete(position)
        await self._ledger.delete_ledgers_before(position.ledger_id)

    async def close(self) -> None:
        if self._ledger is not None:
            await self._ledger.close()
            self._ledger = None
