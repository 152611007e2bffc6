"""Which of a managed ledger's ledgers retention lets go (a pure decision; no I/O here).

Trimming removes whole ledgers from the FRONT of the list only, so the log stays one
contiguous run, and it never picks the current (writable) ledger. Cursors are not consulted:
like Kafka's retention.ms / retention.bytes, data goes by age and size alone.

- Age: a ledger's entries were all written before the NEXT ledger was created, so a ledger
  is past retention_time_s when its successor's created_ms is that old.
- Size: the oldest ledger goes while the total without it is still >= retention_bytes
  (Kafka's rule: keep at least retention_bytes).
- An empty (0-entry) ledger at the front goes whenever retention is configured at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger_backend.managed_ledger.metadata_format import LedgerRecord


def ledgers_past_retention(
    records: Sequence[LedgerRecord],
    *,
    current_ledger_id: int,
    now_ms: int,
    retention_time_s: float | None,
    retention_bytes: int | None,
) -> list[int]:
    """Ids of the oldest ledgers that retention deletes (oldest first, a prefix of records)."""
    if retention_time_s is None and retention_bytes is None:
        return []
    total = sum(r.size for r in records)
    doomed: list[int] = []
    for index, record in enumerate(records):
        if record.ledger_id == current_ledger_id or index == len(records) - 1:
            break  # the current ledger, and the newest one in any case, always stays
        if not record.closed:
            break  # still being written or drained: its size is not final
        successor = records[index + 1] if index + 1 < len(records) else None
        expired = (
            retention_time_s is not None
            and successor is not None
            and successor.created_ms <= now_ms - int(retention_time_s * 1000)
        )
        too_big = retention_bytes is not None and total - record.size >= retention_bytes
        if record.entries == 0 or expired or too_big:
            doomed.append(record.ledger_id)
            total -= record.size
        else:
            break
    return doomed
