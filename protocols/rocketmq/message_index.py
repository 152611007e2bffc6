"""The key index of RocketMQ queues: message keys (KEYS) and client message ids (UNIQ_KEY) ->
their queue offsets, so QUERY_MESSAGE (queryMessage, viewMessage / queryMessageByUniqKey of a
client-generated id) is a dictionary lookup, not a scan of the queue.

One `QueueKeyIndex` per open partition log (held in a WeakKeyDictionary keyed by the log, so
it lives exactly as long as this broker has the partition open and goes with ownership).  The
index is filled lazily and incrementally: a lookup first indexes the records written since the
last lookup (`indexed_to` .. high watermark, each record decoded once per process, whichever
protocol wrote it), then answers from the dictionary — O(1) per key plus the new records.  It
is not persisted: after a restart or an ownership move, the first lookup of a queue indexes it
once.  Like RocketMQ's IndexFile, UNIQ_KEY and every KEYS word share one key space.  A queue
keeps at most `max_entries` (key, offset) pairs; past that the older half is dropped and
lookups of those old messages miss (RocketMQ's index files also roll over).

This module must never write to a queue.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from protocols.kafka.record_batch import Record, parse_header
from protocols.rocketmq.message_encoding import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, from_record

READ_CHUNK_BYTES = 1 << 20
MAX_ENTRIES = 2_000_000


@dataclass
class QueueKeyIndex:
    """key -> [(offset, timestamp)] in offset order, for one queue."""

    indexed_to: int = 0
    entries: int = 0
    keys: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    lock: trio.Lock = field(default_factory=trio.Lock)

    def add(self, record: Record, max_entries: int) -> None:
        _body, props, _meta = from_record(record)
        words = set(props.get(PROPERTY_KEYS, "").split())
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if uniq:
            words.add(uniq)
        for word in words:
            self.keys.setdefault(word, []).append((record.offset, record.timestamp))
            self.entries += 1
        if self.entries > max_entries:
            self._drop_older_half()

    def _drop_older_half(self) -> None:
        offsets = sorted(o for hits in self.keys.values() for o, _ in hits)
        cutoff = offsets[len(offsets) // 2]
        kept: dict[str, list[tuple[int, int]]] = {}
        for key, hits in self.keys.items():
            newer = [h for h in hits if h[0] >= cutoff]
            if newer:
                kept[key] = newer
        self.keys = kept
        self.entries = sum(len(h) for h in kept.values())


_INDEXES: weakref.WeakKeyDictionary[Any, QueueKeyIndex] = weakref.WeakKeyDictionary()


async def find_offsets(plog: Any, key: str, begin_ms: int, end_ms: int,
                       records_of: Callable[[list[bytes], int], list[Record]],
                       max_entries: int = MAX_ENTRIES) -> list[int]:
    """Offsets of the queue's records carrying `key` (KEYS word or UNIQ_KEY) stored within
    [begin_ms, end_ms], oldest first.  `plog` is the partition log (read, high_watermark,
    log_start_offset); `records_of` decodes read batches into records."""
    index = _INDEXES.get(plog)
    if index is None:
        index = _INDEXES[plog] = QueueKeyIndex(indexed_to=plog.log_start_offset)
    async with index.lock:
        offset = max(index.indexed_to, plog.log_start_offset)
        while offset < plog.high_watermark:
            batches = await plog.read(offset, READ_CHUNK_BYTES)
            if not batches:
                break
            for record in records_of(batches, offset):
                index.add(record, max_entries)
            # past the last batch read, control batches (transaction markers) included
            last = max(h.base_offset + h.last_offset_delta for h in map(parse_header, batches))
            offset = max(offset, last + 1)
        index.indexed_to = max(offset, index.indexed_to)
    start = plog.log_start_offset
    return [o for o, ts in index.keys.get(key, ()) if o >= start and begin_ms <= ts <= end_ms]
