"""A compacted log of JSON records in one managed ledger: the durable form of coordinator state.

Each change is one record appended to the ledger (one fsynced quorum write); every
`snapshot_every` records a snapshot record holding the whole state is appended, the cursor
"snapshot" is moved to it and the ledgers before it are deleted, so replay at start is bounded.
Subclasses say how a record changes the state (`_apply`) and what a snapshot holds
(`_snapshot_record`); the record format (a JSON object with a format version `v` and a `type`)
is theirs.

This module must never acknowledge a change before its record is durable, and never interpret
records itself.
"""

from __future__ import annotations

import json
from typing import Any

from ledger_backend.managed_ledger import (
    ManagedLedger,
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
)


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


class CompactedLog:
    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None,
        *,
        ledger_name: str,
        snapshot_every: int = 10_000,
    ) -> None:
        self._factory = factory
        self._config = config
        self._ledger_name = ledger_name
        self._snapshot_every = snapshot_every
        self._ledger: ManagedLedger | None = None
        self._records_since_snapshot = 0
        self._closing = False  # close() was called: a snapshot may meet the closed ledger

    def _apply(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def _snapshot_record(self) -> dict[str, Any]:
        raise NotImplementedError

    async def _replay(self) -> int:
        """Open the ledger and apply every record from the latest snapshot on; the count."""
        self._ledger = await self._factory.open(self._ledger_name, self._config)
        self._closing = False
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
        return replayed

    async def _append(self, record: dict[str, Any]) -> Position:
        """Make `record` durable, then apply it (and snapshot when it is time).

        A `close` while the append is in flight lets it finish (the managed ledger drains its
        appends): the record is durable, so the change succeeds, and the snapshot that fell
        due is left to the next open (its replay starts at the older snapshot)."""
        ledger = self._ledger
        assert ledger is not None, "load() first"
        position = await ledger.append(_encode(record))
        self._apply(record)
        self._records_since_snapshot += 1
        if self._records_since_snapshot >= self._snapshot_every:
            try:
                await self.snapshot()
            except ManagedLedgerClosedError:
                if not self._closing:  # not closed by us: a fault to report
                    raise
        return position

    async def snapshot(self) -> None:
        """Write the whole state as one record, then drop the ledgers it makes redundant."""
        ledger = self._ledger
        if ledger is None:
            raise ManagedLedgerClosedError(f"{self._ledger_name!r} is closed")
        position = await ledger.append(_encode(self._snapshot_record()))
        self._records_since_snapshot = 0
        cursor = await ledger.open_cursor("snapshot")
        await cursor.mark_delete(position)
        await ledger.delete_ledgers_before(position.ledger_id)

    async def close(self) -> None:
        if self._ledger is not None:
            self._closing = True
            await self._ledger.close()
            self._ledger = None
