"""What a partition log works out from its ledger when it opens.

The offsets come from storage, not from memory: the log end is the offset after the last
entry's batch (or the stored log start, or the compaction point, when the ledgers hold less),
the log start the stored one or the first entry's base offset when retention trimmed past it.
Producer state (idempotence sequences, open transactions, aborted transactions) is the last
snapshot in the state node plus a replay of every batch after it up to the log end, which also
seeds the sparse offset index.  A small log (the common case for a partition that an idle
unload or a restart closed after a few writes) is read once from its first entry to its last:
that one read gives both offsets and the replay, where the general path reads the last entry,
the first entry and then the batches after the snapshot, each a round to the bookies (three at
every reopen).  Nothing is trusted that was not read, so a log whose writer died (kill -9) is
opened exactly as before.  A damaged offloaded object does not keep the partition from
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
from ledger_backend.managed_ledger.types import Entry, Position
from protocols.kafka.record_batch import BatchHeader, parse_header

log = logging.getLogger(__name__)

# A log this small (every listed entry, bytes) is read whole in one go when it opens.
SMALL_LOG_ENTRIES = 64
SMALL_LOG_BYTES = 1 << 20


async def read_small_log(plog: StoredLog) -> list[tuple[Entry, BatchHeader]] | None:
    """Every entry of `plog`'s ledgers with its batch header when they are few and small, in
    one read; None when the log is empty, larger than that, or a damaged object (offloaded)
    is in the way: the caller then opens it on the general path."""
    infos = plog.ledger.ledgers
    count = sum(info.entries for info in infos)
    first = plog.ledger.first_position
    if (first is None or not 0 < count <= SMALL_LOG_ENTRIES
            or sum(info.size for info in infos) > SMALL_LOG_BYTES):
        return None
    try:
        entries = await plog.ledger.read(first, count)
    except Exception as exc:
        if storage_fault_of(exc) is not StorageFault.DAMAGED:
            raise
        return None
    if len(entries) != count or entries[-1].position != plog.ledger.last_confirmed:
        return None  # (not what the list says: let the general path decide)
    return [(entry, parse_header(entry.data)) for entry in entries]


def bounds_of(state: Mapping[str, Any], stored: tuple[int, int] | None) -> tuple[int, int]:
    """(log start, log end) from the state node and `stored`: the first batch's base offset
    and the offset after the last batch (None: the ledgers hold no batch)."""
    stored_start = int(state["log_start_offset"])
    # Compaction may remove the last records below its point (expired tombstones): the
    # log end never goes below what it compacted through.
    end = max(stored_start, int(state.get("cleaned_through", 0)))
    if stored is None:
        return end, end
    first_base, after_last = stored
    end = max(end, after_last)
    return min(max(stored_start, first_base), end), end


async def log_bounds(plog: StoredLog, state: Mapping[str, Any],
                     small: list[tuple[Entry, BatchHeader]] | None = None) -> tuple[int, int]:
    """(log start offset, log end offset) of a log being opened with state node `state`
    (`small`: the whole log, already read)."""
    if small is not None:
        return bounds_of(state, (small[0][1].base_offset, small[-1][1].last_offset + 1))
    last = plog.ledger.last_confirmed
    first = plog.ledger.first_position
    if last is None or first is None:
        return bounds_of(state, None)
    after_last = parse_header(await plog.ledger.read_entry(last)).last_offset + 1
    first_base = await _first_offset(plog, first, int(state["log_start_offset"]))
    return bounds_of(state, (first_base, after_last))


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
    plog: StoredLog, snapshot: object, small: list[tuple[Entry, BatchHeader]] | None = None
) -> tuple[ProducerStateManager, int]:
    """Producer state as of the high watermark of `plog` (its offsets already set), from the
    state node's `snapshot` and the batches after it, and how many batches were replayed
    (they count toward the next snapshot).  `small`: the whole log, already read
    (read_small_log)."""
    producers = ProducerStateManager()
    replay_from = 0
    restored = ProducerStateManager.restore(snapshot) if snapshot else None
    if restored is not None and restored[1] <= plog.high_watermark:
        producers, replay_from = restored
    replay = _Replay(plog, producers, replay_from)
    start = max(replay_from, plog.log_start_offset)
    if start >= plog.high_watermark:
        return producers, 0
    if small is not None:
        for entry, header in small:
            if header.last_offset >= start:  # (from the entry holding `start` on, as below)
                replay.batch(entry, header)
        return producers, replay.replayed
    try:
        position = await plog.locate(start)
    except Exception as exc:  # the search met a damaged object: replay from the start
        if storage_fault_of(exc) is not StorageFault.DAMAGED:
            raise
        position = plog.ledger.first_position
    sizes = {info.ledger_id: info.entries for info in plog.ledger.ledgers}
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
            replay.batch(entry, parse_header(entry.data))
        position = plog.ledger.next_position(entries[-1].position)
    return producers, replay.replayed


class _Replay:
    """Feeds the batches at or after `replay_from` to producer state and every batch read to
    the offset index, counting the replayed ones."""

    def __init__(self, plog: StoredLog, producers: ProducerStateManager,
                 replay_from: int) -> None:
        self._plog = plog
        self._producers = producers
        self._replay_from = replay_from
        self._now = int(time.time() * 1000)
        self.replayed = 0

    def batch(self, entry: Entry, header: BatchHeader) -> None:
        self._plog.offset_index.record_read(entry.position, header.base_offset,
                                            header.last_offset)
        if header.base_offset >= self._replay_from:
            self._producers.replay(header, self._now,
                                   entry.data if header.is_control else None)
            # still after the last snapshot: counted, or each open and close without a
            # state write (a short replay) would leave the next open a longer one
            self.replayed += 1
