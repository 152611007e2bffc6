"""Reading one planned split: a task's ledgers, decoded into Arrow record batches.

Shared by the batch reader, the streaming reader and the backfill writer's resume scan; usable
outside Spark too.  This module must never write to ledgerwire, and never open a ledger with
recovery.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ledger_backend.client.errors import LedgerError
from spark_bridge.ledger_access import (
    LedgerAccess,
    ReadMode,
    TailRule,
    mode_on_this_host,
    not_here_hint,
)
from spark_bridge.metadata_access import ConnectionSpec
from spark_bridge.planner import LedgerSplit
from spark_bridge.record_decode import decode_to_arrow


def read_split(spec: ConnectionSpec, mode: ReadMode, split: LedgerSplit, *,
               include_headers: bool, read_committed: bool, tail: TailRule = "quorum",
               access: LedgerAccess | None = None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The rows of one split, as Arrow batches (usable outside Spark too). With `access`
    (a task reading several splits) that ledger client is used and left open. A split read
    from the bookies carries its ledgers' metadata (planner.py): an access opened here for
    it opens no metadata store (nor need a shared one: `LedgerAccess(shipped=())`). A split
    planned in files mode is read over the network where the standalone's files are not
    (`mode_on_this_host`)."""
    if access is None:
        here = mode_on_this_host(spec, mode)  # "files" only where the files are
        shipped = split.ledgers if here == "bookies" else None
        try:
            with LedgerAccess(spec, here, tail=tail, shipped=shipped) as own:
                yield from read_split(spec, here, split, include_headers=include_headers,
                                      read_committed=read_committed, access=own)  # fmt: skip
        except LedgerError as exc:
            if here == mode:
                raise
            raise LedgerError(f"{exc}; {not_here_hint(spec)}") from exc
        return
    access.add_shipped(split.ledgers)
    for ledger in split.offloaded:
        access.add_offloaded(ledger)

    def chunks(ranges: tuple[tuple[int, int, int], ...]) -> Iterator[list[bytes]]:
        for ledger_id, first, last in ranges:
            chunk = access.chunk_entries(ledger_id)  # ~8 MB per chunk, whatever the batches
            yield from access.iter_chunks(ledger_id, first, last, chunk)

    yield from decode_to_arrow(
        chunks(split.ranges), chunks(split.continuation), split.topic, split.partition,
        split.start, split.end, include_headers=include_headers,
        read_committed=read_committed,
    )
