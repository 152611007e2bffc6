"""Which closed ledgers of a managed ledger are due for tiered storage under an offload
policy (keep at most so many bytes on bookies, offload data older than so many seconds), and
how far offloading is behind that policy (a gauge of the admin metrics). Deciding only: the
offload itself, its steps and their crash safety are offloading.py's.
"""

from __future__ import annotations

from typing import Protocol

from ledger_backend.managed_ledger.metadata_format import LedgerRecord


class OffloadedLedger(Protocol):
    """What the policy reads of managed_ledger.ManagedLedger."""

    _records: list[LedgerRecord]

    @property
    def current_ledger_id(self) -> int: ...

    def _clock_ms(self) -> int: ...


def offload_candidates(
    ml: OffloadedLedger, keep_bytes: int | None, older_than_s: float | None = None
) -> list[LedgerRecord]:
    """Closed, not-yet-offloaded ledgers to offload, oldest first. With neither limit: all
    of them. Else those that either rule picks: the oldest until at most `keep_bytes` stay on
    bookies, and those whose data is `older_than_s` old (all written before the NEXT ledger
    was created, as retention reckons). Never the current ledger."""
    current = ml.current_ledger_id
    records = ml._records
    cutoff_ms = None if older_than_s is None else ml._clock_ms() - int(older_than_s * 1000)
    on_bookies = sum(r.size for r in records if r.offload is None)
    chosen: list[LedgerRecord] = []
    for index, record in enumerate(records):
        if record.ledger_id == current or not record.closed:
            break
        if record.offload is not None or record.entries == 0:
            continue
        everything = keep_bytes is None and cutoff_ms is None
        too_much = keep_bytes is not None and on_bookies > keep_bytes
        successor = records[index + 1] if index + 1 < len(records) else None
        too_old = (cutoff_ms is not None and successor is not None
                   and successor.created_ms <= cutoff_ms)
        if everything or too_much or too_old:
            chosen.append(record)
            on_bookies -= record.size
    return chosen


def offload_lag(ml: OffloadedLedger, keep_bytes: int | None, older_than_s: float | None
                ) -> tuple[float, int]:  # fmt: skip
    """How far offloading is behind its policy: (seconds since the oldest ledger the policy
    says should be offloaded now, and is not, was closed; the bytes of all such ledgers still
    on bookies). (0, 0) when the policy is met or off (neither rule set)."""
    if keep_bytes is None and older_than_s is None:
        return 0.0, 0
    due = offload_candidates(ml, keep_bytes, older_than_s)
    if not due:
        return 0.0, 0
    records = ml._records
    position = records.index(due[0])
    after = records[position + 1 : position + 2] or records[position : position + 1]
    closed_ms = after[0].created_ms  # the successor began as it closed
    return max(0.0, (ml._clock_ms() - closed_ms) / 1000), sum(r.size for r in due)
