"""`spark.readStream.format("ledgerwire")`: micro-batches of new records, from the bookies.

Offsets are Spark's Kafka source JSON, {"topic": {"0": next offset, "1": ...}}, so a checkpoint
says exactly where each partition stands; a restarted query resumes from the checkpointed end
of its last committed micro-batch and the rows of a batch are the same on every re-run (rows
are filtered by offset, so a batch boundary inside a record batch splits it cleanly).

Each trigger re-reads the topic list (subscribePattern picks up new topics), the partition
counts (new partitions start at their earliest offset, as in Spark's Kafka source) and each
partition's readable end. `maxOffsetsPerTrigger` is shared among partitions in proportion to
what each has waiting, and every partition with data moves by at least one offset.

With a principal and `ledgerwire.adminUrl` (and bookies to read), nobody in the query holds the
bookie secret: the driver reads with a read ticket its TicketKeeper renews (ticket_keeper.py:
a new one when a ledger or topic is not in it or half its TTL is gone), and every split of a
micro-batch carries a ticket naming its ledgers (StreamSplit); what Spark ships to the
executors (this reader, pickled) has neither the principal's password nor the secret file.

This module must never move a partition's offset backwards, nor skip offsets silently
(failOnDataLoss=false is the only way data that retention deleted is skipped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from ledger_backend.metadata.zk_url import redact
from spark_bridge.authorization import check_read_access
from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
from spark_bridge.options import OptionError, parse_reader_options
from spark_bridge.planner import (
    LedgerSplit,
    offset_range,
    resolve_topic_partitions,
    splits_for_range,
)
from spark_bridge.split_reader import read_split
from spark_bridge.ticket_keeper import TicketKeeper
from spark_bridge.topic_layout import PartitionLayout, partition_layout, partition_ledger_ids

Offsets = dict[str, dict[str, int]]
_RECHECK_S = 60.0  # a principal's READ is checked again after this long (authorization.py)


def _flatten(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def share_limit(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
                max_offsets: int) -> dict[tuple[str, int], int]:  # fmt: skip
    """End offsets advancing at most `max_offsets` in total, in proportion to the backlog."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    end = {}
    for tp, waiting in backlog.items():
        share = (waiting * max_offsets) // total
        if waiting and share == 0:
            share = 1
        end[tp] = start.get(tp, latest[tp]) + min(waiting, share)
    return end


@dataclass(frozen=True)
class StreamSplit(InputPartition):  # type: ignore[misc]
    """One task of a micro-batch: its split and the read ticket that names its ledgers."""

    split: LedgerSplit
    read_ticket: str | None = field(default=None, repr=False)


class LedgerwireStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_reader_options(options, streaming=True)
        self.mode = resolve_read_mode(self.opts.spec, self.opts.read_from)
        self._access: LedgerAccess | None = None
        self._layouts: dict[tuple[str, int], PartitionLayout] = {}
        self._checked: tuple[list[str], float] = ([], 0.0)  # topics whose READ was checked
        self._keeper: TicketKeeper | None = None
        if self.opts.principal is not None and self.opts.admin_url is not None \
                and self.mode == "bookies":  # fmt: skip
            self._keeper = TicketKeeper(self.opts.admin_url, self.opts.principal,
                                        self.opts.ticket_ttl_s)  # fmt: skip
            # the driver reads with tickets too: the secret is needed nowhere
            self.opts = replace(self.opts, spec=replace(self.opts.spec, bookie_secret_file=None))

    @property
    def reads_with_tickets(self) -> bool:
        return self._keeper is not None

    def __getstate__(self) -> dict[str, object]:
        """What Spark ships to the executors: no thread, connections, keeper nor password
        (the ticket comes with each split)."""
        state = dict(self.__dict__)
        state["_access"] = None  # a thread and connections: never shipped to executors
        state["_layouts"] = {}
        if self._keeper is not None:
            state["_keeper"] = None
            state["opts"] = replace(self.opts, principal=None, spec=replace(
                self.opts.spec, read_ticket=None,  # nor the metadata password: splits carry
                metadata_url=redact(self.opts.spec.metadata_url)))  # their ledgers' metadata
        return state

    # ---- driver side ----------------------------------------------------------------------

    def _acc(self) -> LedgerAccess:
        if self._access is None:
            self._access = LedgerAccess(self.opts.spec, self.mode, tail=self.opts.tail_read)
        return self._access

    def _cover(self, topics: list[str], ledgers: set[int]) -> str | None:
        """The keeper's ticket for `topics` and `ledgers`; the driver's own reads switch to it
        when it is a new one (its closed ledgers' spans are kept)."""
        if self._keeper is None:
            return None
        ticket = self._keeper.covering(topics, ledgers)
        if ticket != self.opts.spec.read_ticket:
            self.opts = replace(self.opts, spec=replace(self.opts.spec, read_ticket=ticket))
            if self._access is not None:
                spans = self._access.closed_spans
                self._access.close()
                self._access = None
                self._acc().closed_spans.update(spans)
        return ticket

    def _layout(self, topic: str, partition: int) -> PartitionLayout:
        """partition_layout, under a ticket that names the partition's ledgers."""
        if self._keeper is not None:  # (the keeper adds the topics it had before)
            self._cover([topic], set(partition_ledger_ids(self._acc(), topic, partition,
                                                          self.opts.namespace)))  # fmt: skip
        return partition_layout(self._acc(), topic, partition, self.opts.namespace,
                                refresh=True)  # fmt: skip

    def _refresh(self) -> dict[tuple[str, int], PartitionLayout]:
        access = self._acc()
        layouts = {}
        pairs = resolve_topic_partitions(access, self.opts)
        topics = sorted({t for t, _p in pairs})
        if self.opts.principal is not None and (  # a new topic at once, a revoked ACL within
                topics != self._checked[0] or time.monotonic() - self._checked[1] > _RECHECK_S):
            check_read_access(self.opts.principal, topics)  # a minute (a login per check)
            self._checked = (topics, time.monotonic())
        if self._keeper is not None:  # one ticket for every partition's ledgers
            ledgers = {ledger for t, p in pairs
                       for ledger in partition_ledger_ids(access, t, p, self.opts.namespace)}
            self._cover(topics, ledgers)
        for topic, partition in pairs:
            layouts[(topic, partition)] = partition_layout(
                self._acc(), topic, partition, self.opts.namespace, refresh=True)
        self._layouts = layouts
        return layouts

    def initialOffset(self) -> Offsets:
        access = self._acc()
        flat = {}
        for tp, layout in self._refresh().items():
            start, _end = offset_range(access, self.opts, layout, ending=None)
            flat[tp] = start
        return _nest(flat)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        layouts = self._refresh()
        begin = _flatten(start)
        latest: dict[tuple[str, int], int] = {}
        for tp, layout in layouts.items():
            latest[tp] = max(layout.end_offset, begin.get(tp, layout.earliest_offset))
            if tp not in begin:  # a new partition (or topic) starts at its earliest offset
                begin[tp] = layout.earliest_offset
        if isinstance(limit, ReadMaxRows):
            latest = share_limit(begin, latest, limit.max_rows)
        for tp, offset in begin.items():  # partitions that vanished keep their offset
            latest.setdefault(tp, offset)
        return _nest(latest)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        begin, finish = _flatten(start), _flatten(end)
        layouts = {}
        for tp, stop in sorted(finish.items()):
            layout = self._layouts.get(tp)
            if layout is None or layout.end_offset < stop:
                layout = self._layout(tp[0], tp[1])
            layouts[tp] = layout
        # one ticket, fresh and naming every ledger, for the driver's planning reads and for
        # the executors (the ledgers of the layouts are the splits' and more)
        ticket = self._cover(sorted({t for t, _p in layouts}),
                             {s.ledger_id for lay in layouts.values() for s in lay.ledgers}
                             ) if layouts else None  # fmt: skip
        splits: list[LedgerSplit] = []
        for tp, layout in layouts.items():
            stop = finish[tp]
            first = begin.get(tp, layout.earliest_offset)
            if first < layout.earliest_offset:
                if self.opts.fail_on_data_loss:
                    raise OptionError(
                        f"option 'failOnDataLoss': offsets {first}..{layout.earliest_offset} of "
                        f"{tp[0]}-{tp[1]} were deleted before this query read them; set "
                        "failOnDataLoss=false to skip them")
                first = layout.earliest_offset
            if stop > first:
                splits.extend(splits_for_range(self._acc(), layout, first, stop,
                                               max_split_bytes=self.opts.max_split_bytes))
        return [StreamSplit(split, ticket) for split in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamSplit)
        spec = self.opts.spec
        if partition.read_ticket is not None:
            spec = replace(spec, read_ticket=partition.read_ticket, bookie_secret_file=None)
        return read_split(spec, self.mode, partition.split,
                          include_headers=self.opts.include_headers,
                          read_committed=self.opts.read_committed,
                          tail=self.opts.tail_read)  # fmt: skip

    def commit(self, end: Offsets) -> None:
        pass  # offsets live in Spark's checkpoint; ledgerwire keeps no reader state

    def stop(self) -> None:
        if self._access is not None:
            self._access.close()
            self._access = None
