"""Planning a read: which topic partitions, which offset range of each, and which Spark tasks.

Resolution follows Spark's Kafka source: topics from subscribe / subscribePattern / assign,
then each partition's [start, end) from the offset, timestamp or per-partition options
(options.py). With failOnDataLoss=true a start before the log start or an end beyond the
readable end is an error naming the option; with false it is clamped.

Splitting follows the ledgers: one split per ledger a range touches (the first and last ones
cut at the entries holding the range's ends, found by binary search on batch headers); a split
of a large ledger is cut by entry range into parts of at most `ledgerwire.maxSplitBytes`
(128 MiB by default, as Spark's spark.sql.files.maxPartitionBytes; estimated from a closed or
offloaded ledger's length: an open ledger's length is not known yet, so it stays whole), then,
while there are fewer splits than minPartitions, the split with the most entries is halved.
A split also carries the rest of its partition (as entry ranges) so that a task whose range
ends inside an open transaction can read on to its marker (record_decode.py).

This module must never read entries beyond a ledger's last-add-confirmed and never plan a
split that overlaps another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from spark_bridge.ledger_access import LedgerAccess, ShippedLedger
from spark_bridge.offloaded_ledgers import OffloadedLedger
from spark_bridge.options import EARLIEST, LATEST, OffsetBound, OptionError, ReaderOptions
from spark_bridge.topic_layout import (
    PartitionLayout,
    entry_for_offset,
    list_topics,
    offset_for_timestamp,
    partition_layout,
    spans_covering,
    topic_partition_count,
)

EntryRange = tuple[int, int, int]  # ledger id, first entry, last entry (inclusive)


@dataclass
class LedgerSplit(InputPartition):  # type: ignore[misc]
    """One Spark task: entry ranges of one partition, rows filtered to [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
    ranges: tuple[EntryRange, ...]
    continuation: tuple[EntryRange, ...] = ()
    offloaded: tuple[OffloadedLedger, ...] = ()  # ledgers of the ranges read from the store
    # the bookie ledgers' metadata and readable ends, so executors open no metadata store
    ledgers: tuple[ShippedLedger, ...] = field(default=(), repr=False)

    @property
    def entries(self) -> int:
        return sum(last - first + 1 for _l, first, last in self.ranges)


def resolve_topic_partitions(access: LedgerAccess, opts: ReaderOptions
                             ) -> list[tuple[str, int]]:  # fmt: skip
    """The (topic, partition) pairs a query reads; OptionError for unknown topics/partitions."""
    pairs: list[tuple[str, int]] = []
    if opts.subscribe is not None:
        for topic in opts.subscribe:
            count = topic_partition_count(access, topic)
            if count is None:
                raise OptionError(f"option 'subscribe': unknown topic {topic!r}")
            pairs.extend((topic, p) for p in range(count))
    elif opts.subscribe_pattern is not None:
        regex = re.compile(opts.subscribe_pattern)
        for topic in list_topics(access):
            if regex.fullmatch(topic):
                count = topic_partition_count(access, topic) or 0
                pairs.extend((topic, p) for p in range(count))
    else:
        assert opts.assign is not None
        for topic, partitions in opts.assign.items():
            count = topic_partition_count(access, topic)
            if count is None:
                raise OptionError(f"option 'assign': unknown topic {topic!r}")
            for p in partitions:
                if p >= count:
                    raise OptionError(f"option 'assign': topic {topic!r} has no partition {p} "
                                      f"(it has {count})")
                pairs.append((topic, p))
    return sorted(set(pairs))


def _bound_offset(access: LedgerAccess, opts: ReaderOptions, bound: OffsetBound,
                  layout: PartitionLayout, *, is_start: bool) -> int:  # fmt: skip
    topic, partition = layout.topic, layout.partition
    if bound.kind == "earliest":
        return layout.earliest_offset
    if bound.kind == "latest":
        return layout.end_offset
    if bound.kind == "offsets":
        value = bound.per_partition.get(topic, {}).get(partition)
        if value is None:
            value = EARLIEST if is_start else LATEST
        if value == EARLIEST:
            return layout.earliest_offset
        if value == LATEST:
            return layout.end_offset
        return value
    ts = bound.timestamp if bound.kind == "timestamp" else \
        bound.per_partition.get(topic, {}).get(partition)  # fmt: skip
    if ts is None:
        return layout.earliest_offset if is_start else layout.end_offset
    found = offset_for_timestamp(access, layout, ts)
    if found is not None:
        return found
    if is_start and opts.timestamp_strategy == "error":
        raise OptionError(f"option '{bound.option}': no record of {topic}-{partition} has a "
                          f"timestamp >= {ts} (set startingOffsetsByTimestampStrategy=latest "
                          "to start at the end instead)")
    return layout.end_offset


def offset_range(access: LedgerAccess, opts: ReaderOptions, layout: PartitionLayout,
                 starting: OffsetBound | None = None, ending: OffsetBound | None = None
                 ) -> tuple[int, int]:  # fmt: skip
    """[start, end) of one partition, checked against what the log holds."""
    starting = starting or opts.starting
    ending = ending or opts.ending
    start = _bound_offset(access, opts, starting, layout, is_start=True)
    end = _bound_offset(access, opts, ending, layout, is_start=False)
    name = f"{layout.topic}-{layout.partition}"
    if start < layout.earliest_offset:
        if opts.fail_on_data_loss:
            raise OptionError(
                f"option '{starting.option}': offset {start} of {name} is before the log start "
                f"{layout.earliest_offset} (deleted or never written); set failOnDataLoss=false "
                "to start at the earliest offset")
        start = layout.earliest_offset
    if end > layout.end_offset:
        if opts.fail_on_data_loss:
            raise OptionError(
                f"option '{ending.option}': offset {end} of {name} is beyond the end of the "
                f"log {layout.end_offset}; set failOnDataLoss=false to stop at the end")
        end = layout.end_offset
    if start > layout.end_offset:
        if opts.fail_on_data_loss:
            raise OptionError(
                f"option '{starting.option}': offset {start} of {name} is beyond the end of "
                f"the log {layout.end_offset}; set failOnDataLoss=false to read nothing")
        start = layout.end_offset
    if end < start:
        raise OptionError(f"options '{starting.option}'/'{ending.option}': {name} would end "
                          f"at {end}, before its start {start}")
    return start, end


SHIPPED_CONTINUATION = 16  # ledgers past a split whose metadata it carries (see below)
MAX_SPLIT_BYTES = 128 << 20  # ledgerwire.maxSplitBytes' default


def splits_for_range(access: LedgerAccess, layout: PartitionLayout, start: int, end: int, *,
                     max_split_bytes: int | None = None) -> list[LedgerSplit]:  # fmt: skip
    """One split per ledger holding part of [start, end), a large ledger's cut into entry
    ranges of at most `max_split_bytes` (cut_large); empty when start == end."""
    if start >= end:
        return []
    covering = spans_covering(layout, start, end)
    if covering is None:
        return []
    first_span, last_span = covering
    ranges: list[EntryRange] = []
    for i in range(first_span, last_span + 1):
        span = layout.ledgers[i]
        first = entry_for_offset(access, span, start) if i == first_span else 0
        last = entry_for_offset(access, span, end - 1) if i == last_span else span.last_entry
        ranges.append((span.ledger_id, first, last))
    rest: list[EntryRange] = []
    span = layout.ledgers[last_span]
    if ranges[-1][2] < span.last_entry:
        rest.append((span.ledger_id, ranges[-1][2] + 1, span.last_entry))
    rest.extend((s.ledger_id, 0, s.last_entry) for s in layout.ledgers[last_span + 1:])
    offloaded = tuple(s.offloaded for s in layout.ledgers[first_span:]
                      if s.offloaded is not None)  # fmt: skip
    # both modes: a task on a host without the standalone's files reads the bookies with it
    shipped = {s.ledger_id: access.shipped(s.ledger_id)
               for s in layout.ledgers[first_span:] if s.offloaded is None}
    splits = []
    for k, r in enumerate(ranges):
        continuation = tuple(ranges[k + 1:]) + tuple(rest)
        needed = {r[0]}  # and the next few ledgers: an open transaction's markers
        for c in continuation:  # (metadata for every later ledger in every split would grow
            if len(needed) > SHIPPED_CONTINUATION:  # with the square of the ledgers)
                break
            needed.add(c[0])
        split = LedgerSplit(layout.topic, layout.partition, start, end, (r,), continuation,
                            offloaded, tuple(shipped[i] for i in sorted(needed)
                                             if i in shipped))  # fmt: skip
        splits.extend(cut_large(access, split, max_split_bytes or MAX_SPLIT_BYTES))
    return splits


def cut(split: LedgerSplit, parts: int) -> list[LedgerSplit]:
    """`split` (one entry range) as `parts` consecutive entry ranges of near-equal entry
    counts (fewer when it has fewer entries); each part reads on through the later parts'
    ranges and the split's continuation, as the whole split would."""
    (ledger_id, first, last), = split.ranges
    parts = max(1, min(parts, last - first + 1))
    if parts == 1:
        return [split]
    bounds = [first + (last - first + 1) * k // parts for k in range(parts + 1)]
    ranges = [(ledger_id, bounds[k], bounds[k + 1] - 1) for k in range(parts)]
    return [LedgerSplit(split.topic, split.partition, split.start, split.end, (r,),
                        tuple(ranges[k + 1:]) + split.continuation, split.offloaded,
                        split.ledgers) for k, r in enumerate(ranges)]  # fmt: skip


def cut_large(access: LedgerAccess, split: LedgerSplit, max_bytes: int) -> list[LedgerSplit]:
    """`split` cut into entry ranges of at most about `max_bytes` each (see the module doc)."""
    (ledger_id, first, last), = split.ranges
    per_entry = access.entry_bytes(ledger_id)
    if per_entry is None:
        return [split]
    return cut(split, -(-int((last - first + 1) * per_entry) // max_bytes))


def apply_min_partitions(splits: list[LedgerSplit], min_partitions: int | None
                         ) -> list[LedgerSplit]:  # fmt: skip
    """Halve the largest split (by entries) until there are min_partitions splits."""
    if not min_partitions:
        return splits
    splits = list(splits)
    while len(splits) < min_partitions:
        biggest = max(range(len(splits)), key=lambda i: splits[i].entries, default=None)
        if biggest is None:
            break
        halves = cut(splits[biggest], 2)
        if len(halves) == 1:
            break  # nothing left to halve
        splits[biggest:biggest + 1] = halves
    return splits


def plan_batch(access: LedgerAccess, opts: ReaderOptions) -> list[LedgerSplit]:
    pairs = resolve_topic_partitions(access, opts)
    splits: list[LedgerSplit] = []
    for topic, partition in pairs:
        layout = partition_layout(access, topic, partition, opts.namespace)
        start, end = offset_range(access, opts, layout)
        splits.extend(splits_for_range(access, layout, start, end,
                                       max_split_bytes=opts.max_split_bytes))  # fmt: skip
    return apply_min_partitions(splits, opts.min_partitions)
