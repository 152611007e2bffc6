"""Per-ledger state a bookie keeps: fenced flag, LAC, last stored entry id, deleted tombstone.

The table lives in memory; changes are made durable twice over: first as journal records
(FENCE, DELETE, and the LAC carried by each ADD) before they are acknowledged, then in the
index log at each checkpoint (``encode_states``), after which the journal may be trimmed.
A deleted ledger stays as a tombstone so that a deposed writer can never have an add to it
acknowledged again (ledger ids are never reused by the metadata store).

This module is pure data: it must never do I/O or import Trio.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

STATE_RECORD = struct.Struct("<QBqq")  # ledger id, flags, lac, last entry id
FLAG_FENCED = 1
FLAG_DELETED = 2


@dataclass(slots=True)
class LedgerState:
    fenced: bool = False
    deleted: bool = False
    lac: int = -1
    last_entry_id: int = -1


class LedgerStateTable:
    """ledger id -> LedgerState, remembering which ledgers changed since the last checkpoint."""

    def __init__(self) -> None:
        self._states: dict[int, LedgerState] = {}
        self._dirty: set[int] = set()

    def get(self, ledger_id: int) -> LedgerState | None:
        return self._states.get(ledger_id)

    def get_or_create(self, ledger_id: int) -> LedgerState:
        state = self._states.get(ledger_id)
        if state is None:
            state = self._states[ledger_id] = LedgerState()
            self._dirty.add(ledger_id)
        return state

    def mark_dirty(self, ledger_id: int) -> None:
        self._dirty.add(ledger_id)

    def live_ids(self) -> list[int]:
        return sorted(i for i, s in self._states.items() if not s.deleted)

    def all_ids(self) -> Iterable[int]:
        return self._states.keys()

    def __len__(self) -> int:
        return len(self._states)

    def take_dirty(self) -> list[tuple[int, LedgerState]]:
        """Snapshot (copies) of every changed ledger; clears the dirty set."""
        out = []
        for ledger_id in sorted(self._dirty):
            s = self._states.get(ledger_id)
            if s is not None:
                out.append((ledger_id, LedgerState(s.fenced, s.deleted, s.lac, s.last_entry_id)))
        self._dirty.clear()
        return out

    def restore_dirty(self, ledger_ids: Iterable[int]) -> None:
        """A checkpoint failed: these changes still have to be written next time."""
        self._dirty.update(ledger_ids)

    def snapshot(self) -> list[tuple[int, LedgerState]]:
        return [
            (i, LedgerState(s.fenced, s.deleted, s.lac, s.last_entry_id))
            for i, s in sorted(self._states.items())
        ]

    def load(self, ledger_id: int, state: LedgerState) -> None:
        self._states[ledger_id] = state


def encode_states(states: list[tuple[int, LedgerState]]) -> bytes:
    parts = []
    for ledger_id, s in states:
        flags = (FLAG_FENCED if s.fenced else 0) | (FLAG_DELETED if s.deleted else 0)
        parts.append(STATE_RECORD.pack(ledger_id, flags, s.lac, s.last_entry_id))
    return b"".join(parts)


def decode_states(body: memoryview) -> list[tuple[int, LedgerState]]:
    if len(body) % STATE_RECORD.size:
        raise ValueError("ledger state body is not a whole number of records")
    out = []
    for ledger_id, flags, lac, last in STATE_RECORD.iter_unpack(body):
        fenced, deleted = bool(flags & FLAG_FENCED), bool(flags & FLAG_DELETED)
        out.append((ledger_id, LedgerState(fenced, deleted, lac, last)))
    return out
