"""The state of one Kafka transaction: its states, the one table of moves between them (Kafka's
TransactionState rules) and TransactionMetadata, the immutable value the transaction
coordinator (transaction_coordinator.py) writes durably before each change takes effect, with
its record form. No I/O, no coordinator logic: what a state means and how it is written down.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey

RECORD_VERSION = 1


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


# The one transition table: state -> the states it may move to.
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.DEAD: frozenset(),
}


class IllegalTransitionError(Exception):
    """A coordinator bug: a transition the table does not allow (never a client's fault)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TransactionMetadata:
    """The durable state of one transactional id (immutable: a change is a new value)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[OffsetKey] = frozenset()
    # group id -> offsets sent with TxnOffsetCommit, applied when the transaction commits
    pending_offsets: Mapping[str, Mapping[OffsetKey, CommittedOffset]] = field(
        default_factory=dict
    )
    txn_start_ms: int = -1
    last_update_ms: int = 0

    def moved_to(self, state: TxnState, **changes: Any) -> TransactionMetadata:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(
                f"transaction {self.transactional_id!r}: {self.state.value} -> {state.value}"
            )
        return replace(self, state=state, last_update_ms=now_ms(), **changes)

    def to_record(self) -> dict[str, Any]:
        return {
            "v": RECORD_VERSION, "id": self.transactional_id, "pid": self.producer_id,
            "epoch": self.producer_epoch, "timeout_ms": self.timeout_ms,
            "state": self.state.value, "partitions": sorted([t, p] for t, p in self.partitions),
            "offsets": {
                g: [[t, p, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms]
                    for (t, p), o in offsets.items()]
                for g, offsets in self.pending_offsets.items()
            },
            "start_ms": self.txn_start_ms, "update_ms": self.last_update_ms,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TransactionMetadata:
        if record.get("v") != RECORD_VERSION:
            raise ValueError(f"transaction record of unknown version {record.get('v')!r}")
        return cls(
            transactional_id=str(record["id"]), producer_id=int(record["pid"]),
            producer_epoch=int(record["epoch"]), timeout_ms=int(record["timeout_ms"]),
            state=TxnState(record["state"]),
            partitions=frozenset((str(t), int(p)) for t, p in record["partitions"]),
            pending_offsets={
                g: {(str(t), int(p)): CommittedOffset(int(o), int(e), m, int(ts))
                    for t, p, o, e, m, ts in rows}
                for g, rows in record["offsets"].items()
            },
            txn_start_ms=int(record["start_ms"]), last_update_ms=int(record["update_ms"]),
        )
