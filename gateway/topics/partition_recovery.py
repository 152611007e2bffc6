"""What a partition log works out from its ledger when it opens.

The offsets come from storage, not from memory: the log end is the offset after the last
entry's batch (or the stored log start, or the compaction point, when the ledgers hold less),
the log start the stored one or the first entry's base offset when retention trimmed past it.
Producer state (idempotence sequences, open transactions, aborted transactions) is the last
snapshot in the state node plus a replay of every batch after it up to the log end, which also
seeds the sparse offset index.  A damaged offloaded object does not keep the partition from
opening: the stored log start is kept when the first entry is unreadable, and the replay skips
a damaged ledger with a WARNING (reads of that range are answered as damaged).

This module must never write anything: the log that opens owns what these functions return.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from gateway.topics.producer_state import ProducerStateManager
from gateway.topics.stored_log import StoredLog
from ledger_backend.faults import StorageFault, storage_fault_of
from ledger_backend.managed_ledger.types import Position
from protocols.kafka.record_batch import parse_header

log = logging.getLogger(__name__)


async def log_bounds(plog: StoredLog, state: Mapping[str, Any]) -> tuple[int, int]:
    """(log start offset, log end offset) of a log being opened with state node `state`."""
    stored_start = int(state["log_start_offset"])
    # Compaction may remove the last records below its point (expired tombstones): the
    # log end never goes below what it compacted through.
    end = max(stored_start, int(state.get("cleaned_through", 0)))
    last = plog.ledger.last_confirmed
    if last is not None:
        end = max(end, parse_header(await plog.ledger.read_entry(last)).last_offset + 1)
    first_position = plog.ledger.first_position
    start = stored_start
    if first_position is not None and last is not None:
        start = max(start, await _first_offset(plog, first_position, stored_start))
    else:
        start = end
    return min(start, end), end


async def _first_offset(plog: StoredLog, first: Position, stored_start: int) -> int:
    """The base offset of the log's first entry, or the stored log start when that entry
    is in a missing or corrupt offloaded object: the partition still opens (its newer
    ledgers served, appends taken) and reads of the damaged range are answered as such."""
    try:
        return parse_header(await plog.ledger.read_entry(first)).base_offset
    except Exception as exc:
        if storage_fault_of(exc) is not StorageFault.DAMAGED:
            raise
        log.warning("%s: first entry unreadable (%s); log start kept at the stored %d",
                    plog.name, exc, stored_start)
        return stored_start


async def replay_producer_state(
    plog: StoredLog, snapshot: object
) -> tuple[ProducerStateManager, int]:
    """Producer state as of the high watermark of `plog` (its offsets already set), from the
    state node's `snapshot` and the batches after it, and how many batches were replayed
    (they count toward the next snapshot)."""
    producers = ProducerStateManager()
    replayed = 0
    replay_from = 0
    restored = ProducerStateManager.restore(snapshot) if snapshot else None
    if restored is not None and restored[1] <= plog.high_watermark:
        producers, replay_from = restored
    start = max(replay_from, plog.log_start_offset)
    if start >= plog.high_watermark:
        return producers, replayed
    try:
        position = await plog.locate(start)
    except Exception as exc:  # the search met a damaged object: replay from the start
        if storage_fault_of(exc) is not StorageFault.DAMAGED:
            raise
        position = plog.ledger.first_position
    sizes = {info.ledger_id: info.entries for info in plog.ledger.ledgers}
    now = int(time.time() * 1000)
    while position is not None:
        # one ledger per read, so that a damaged object fails only its own ledger's read
        left = sizes.get(position.ledger_id, 0) - position.entry_id
        try:
            entries = await plog.ledger.read(
                position, max(1, min(left, plog.config.replay_chunk_entries)))
        except Exception as exc:
            if storage_fault_of(exc) is not StorageFault.DAMAGED or left < 1:
                raise
            log.warning("%s: producer state replay skips ledger %d: %s",
                        plog.name, position.ledger_id, exc)
            position = plog.ledger.next_position(
                Position(position.ledger_id, sizes[position.ledger_id] - 1))
            continue
        if not entries:
            break
        for entry in entries:
            header = parse_header(entry.data)
            plog.offset_index.record_read(entry.position, header.base_offset, header.last_offset)
            if header.base_offset >= replay_from:
                producers.replay(header, now, entry.data if header.is_control else None)
                # still after the last snapshot: counted, or each open and close without a
                # state write (a short replay) would leave the next open a longer one
                replayed += 1
        position = plog.ledger.next_position(entries[-1].position)
    return producers, replayed
