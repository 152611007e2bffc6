"""What a topic partition looks like on the ledger backend, as the bridge's planner needs it.

A topic is the node /ledgerwire/topics/<name> (gateway/topics/topic_service.py); partition p is the
managed ledger "<namespace>/<topic>-<p>" (namespace "public/default"), whose node lists its
ledgers oldest first (ledger_backend/managed_ledger/metadata_format.py). Every entry is one
Kafka v2 record batch with its baseOffset already set, and offsets are dense, so a ledger
covers [base offset of its first entry, last offset of its last entry + 1) and the next ledger
starts where it ends. The partition state node /ledgerwire/partition-state/<t>/<p> holds the
log start offset that DeleteRecords and retention move.

`partition_layout` reads the first and last batch header of each ledger (two entry reads per
ledger) to learn those spans (a ledger offloaded to tiered storage is read from the store when
the job names it, offloaded_ledgers.py, and an OffloadedLedgerError when it lives only there
and the job does not); `entry_for_offset` binary-searches a ledger's entries by header;
`offset_for_timestamp` scans headers (timestamps need not be monotonic, so there is no index
to trust) and decodes only the batch where the answer lies.

This module must never write anything, and never decode records it does not need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from protocols.kafka.record_batch import decode_records, parse_header
from spark_bridge.ledger_access import LedgerAccess
from spark_bridge.offloaded_ledgers import OffloadedLedger, OffloadedLedgerError

TOPICS_PATH = "/ledgerwire/topics"
PARTITION_STATE_PATH = "/ledgerwire/partition-state"
MANAGED_LEDGER_ROOT = "/ledgerwire/managed-ledgers"
DEFAULT_NAMESPACE = "public/default"


class UnknownTopicError(ValueError):
    """The topic (or partition) does not exist in ledgerwire's metadata."""


@dataclass(frozen=True, slots=True)
class LedgerSpan:
    ledger_id: int
    last_entry: int      # readable entries are 0..last_entry
    first_offset: int    # base offset of entry 0
    end_offset: int      # one past the last offset of last_entry
    closed: bool
    offloaded: OffloadedLedger | None = None  # read from the offload store, not bookies


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    topic: str
    partition: int
    log_start_offset: int
    end_offset: int                   # one past the last readable offset (the "latest")
    ledgers: tuple[LedgerSpan, ...]   # non-empty ledgers, oldest first

    @property
    def earliest_offset(self) -> int:
        first = self.ledgers[0].first_offset if self.ledgers else self.end_offset
        return min(max(self.log_start_offset, first), self.end_offset)


def list_topics(access: LedgerAccess) -> list[str]:
    names = []
    for name in access.children(TOPICS_PATH):
        raw = access.get(f"{TOPICS_PATH}/{name}")
        if raw is None:
            continue
        doc = json.loads(raw)
        if not doc.get("deleting"):
            names.append(name)
    return sorted(names)


def topic_partition_count(access: LedgerAccess, topic: str) -> int | None:
    raw = access.get(f"{TOPICS_PATH}/{topic}")
    if raw is None:
        return None
    doc = json.loads(raw)
    if doc.get("deleting"):
        return None
    return int(doc["partitions"])


def _batch_bounds(payload: bytes) -> tuple[int, int, int]:
    """(base offset, last offset + 1, max timestamp) from one entry's batch header."""
    header = parse_header(payload)
    return header.base_offset, header.base_offset + header.last_offset_delta + 1, \
        header.max_timestamp  # fmt: skip


def partition_ledger_ids(access: LedgerAccess, topic: str, partition: int,
                         namespace: str = DEFAULT_NAMESPACE) -> list[int]:  # fmt: skip
    """The ledgers partition p lists now, oldest first (metadata only: no bookie is read)."""
    path = managed_ledger_path(MANAGED_LEDGER_ROOT, f"{namespace}/{topic}-{partition}")
    raw = access.get(path)
    return [] if raw is None else [r.ledger_id for r in decode_managed_ledger(raw, path).ledgers]


def partition_layout(access: LedgerAccess, topic: str, partition: int,
                     namespace: str = DEFAULT_NAMESPACE, *, refresh: bool = False
                     ) -> PartitionLayout:  # fmt: skip
    ml_name = f"{namespace}/{topic}-{partition}"
    path = managed_ledger_path(MANAGED_LEDGER_ROOT, ml_name)
    raw = access.get(path)
    spans: list[LedgerSpan] = []
    if raw is not None:
        node = decode_managed_ledger(raw, path)
        for record in node.ledgers:
            offloaded = None
            if record.offload is not None and access.can_read_offloaded(record.offload.driver):
                offloaded = OffloadedLedger(record.ledger_id, record.offload.driver,
                                            record.offload.key, record.offload.size,
                                            record.entries - 1,
                                            record.offload.location)  # fmt: skip
                access.add_offloaded(offloaded)
            elif record.offload is not None and record.offload.bookie_deleted:
                raise OffloadedLedgerError(
                    f"{topic}-{partition}: ledger {record.ledger_id} is offloaded to tiered "
                    f"storage ({record.offload.driver} object {record.offload.key!r}) and no "
                    "longer on bookies; tell the job where the brokers' [offload] store is: "
                    "option ledgerwire.offload.directory (filesystem) or "
                    "ledgerwire.offload.bucket/.prefix/.endpoint/.region (s3); "
                    "replay: --offload-directory / --offload-bucket ...")
            known = access.closed_spans.get(record.ledger_id)
            if known is not None:  # a closed ledger's span never changes
                spans.append(known)
                continue
            end = access.ledger_end(record.ledger_id, refresh=refresh)
            if end.last_entry < 0:
                continue
            if end.last_entry == 0:
                first = last = access.read(record.ledger_id, 0, 0)[0]
            else:
                first = access.read(record.ledger_id, 0, 0)[0]
                last = access.read(record.ledger_id, end.last_entry, end.last_entry)[0]
            span = LedgerSpan(record.ledger_id, end.last_entry, _batch_bounds(first)[0],
                              _batch_bounds(last)[1], end.closed, offloaded)
            if span.closed:
                access.closed_spans[span.ledger_id] = span
            spans.append(span)
    log_start = 0
    state = access.get(f"{PARTITION_STATE_PATH}/{topic}/{partition}")
    if state is not None:
        log_start = int(json.loads(state).get("log_start_offset", 0))
    end_offset = spans[-1].end_offset if spans else log_start
    return PartitionLayout(topic, partition, log_start, end_offset, tuple(spans))


def spans_covering(layout: PartitionLayout, start: int, end: int) -> tuple[int, int] | None:
    """(first, last) index of the spans holding any offset of [start, end), None if none.

    A compacted log has gaps (between ledgers too): a bound in a gap takes the span after it
    (start) or before it (end), so no surviving record of the range is left out."""
    first = next((i for i, s in enumerate(layout.ledgers) if s.end_offset > start), None)
    last = next((i for i in range(len(layout.ledgers) - 1, -1, -1)
                 if layout.ledgers[i].first_offset < end), None)
    if first is None or last is None or first > last:
        return None
    return first, last


def entry_for_offset(access: LedgerAccess, span: LedgerSpan, offset: int) -> int:
    """The last entry of `span` whose batch starts at or before `offset` (entry 0 when none
    does); batches are in offset order, so a binary search. The span's own bounds answer
    without a read: at or before entry 0's base it is entry 0 (bases only grow), at or past
    the last entry's last offset the last entry (its base is at most that offset); so a
    whole-log range (earliest..latest) plans with no search reads at all."""
    if offset <= span.first_offset:
        return 0
    if offset >= span.end_offset - 1:
        return span.last_entry
    lo, hi = 0, span.last_entry
    while lo < hi:
        mid = (lo + hi + 1) // 2
        base, _end, _ts = _batch_bounds(access.read(span.ledger_id, mid, mid)[0])
        if base <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def offset_for_timestamp(access: LedgerAccess, layout: PartitionLayout, ts_ms: int,
                         chunk: int = 256) -> int | None:  # fmt: skip
    """Kafka's ListOffsets by timestamp: the first offset whose timestamp is >= ts_ms, from the
    earliest offset on; None if there is none."""
    earliest = layout.earliest_offset
    for span in layout.ledgers:
        if span.end_offset <= earliest:
            continue
        for entries in access.iter_chunks(span.ledger_id, 0, span.last_entry, chunk):
            for payload in entries:
                header = parse_header(payload)
                if header.is_control or header.max_timestamp < ts_ms:
                    continue
                if header.base_offset + header.last_offset_delta < earliest:
                    continue
                for record in decode_records(payload):
                    if record.offset >= earliest and record.timestamp >= ts_ms:
                        return record.offset
    return None
