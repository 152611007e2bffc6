"""RocketMQ messages the broker holds, moved between `--workers 1` and `--workers N` layouts.

Delayed messages wait in SCHEDULE_TOPIC_XXXX and undecided transactional (half) messages in
RMQ_SYS_TRANS_HALF_TOPIC, with their decisions in RMQ_SYS_TRANS_OP_HALF_TOPIC.  The shapes read
those partitions differently:

- a one-process standalone is one RocketMQ broker: delay level L waits in partition L - 1, the
  timer queue in partition `levels`, half messages and decisions in partition 0, and a held
  message's REAL_QID is its real topic's partition;
- workers serve each bundle b as a broker of its own (gateway/rocketmq/bundle_services.py):
  bundle b's queue q of a bundle-pinned topic is partition q * B + b, so level L waits in
  partition (L - 1) * B + b, half messages and decisions in partition b, and REAL_QID is a
  queue of bundle b (the real partition's index among the bundle's partitions of its topic).

So what is still pending when the shape changes is moved at the next start, before anything is
served (the supervisor before its workers start; the one-process standalone before its RocketMQ
broker loads), once the RocketMQ offsets (which hold the scan positions) sit in the single
ledger: a copy of each pending message goes to where the new shape reads it, with REAL_QID
translated and its store time (so its due time) kept; a delayed message goes to the bundle of
its real partition.  Then the scan positions of the schedule partitions pass what was moved, and
each moved half message gets a decision record ("m") in its old partition, so its old handle
resolves nothing (a producer's answer to the check-back of the copy decides it).

Crash safety (kill -9 at each step: tests/rocketmq/test_rocketmq_held_layout_crash.py): each
copy names what it copies (MOVED_PROPERTY: target layout, partition, offset); a move repeated
after a crash copies only what has no copy yet, and the positions and decisions it writes again
are the same.  The layout the held topics are in is recorded in the metadata store
(HELD_LAYOUT_PATH: 1 or the bundle count), written only after a move completed; a data
directory from before it is inferred from which RocketMQ offsets ledgers exist.

This module must never drop a pending message, nor leave one where the new shape reads it
twice.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway.cluster.bundle_placement import bundle_of
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.bundle_broker import offsets_ledger_name as bundle_ledger_name
from gateway.rocketmq.delays import RECALL_PROPERTY, SCHEDULE_GROUP
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQOffsets
from gateway.rocketmq.transactions import SCAN_GROUP
from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.managed_ledger.factory import DEFAULT_ROOT
from ledger_backend.managed_ledger.metadata_format import managed_ledger_path
from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from protocols.kafka.built_batch import built_batch
from protocols.kafka.record_batch import Record
from protocols.rocketmq.delay_levels import parse_delay_levels
from protocols.rocketmq.handlers.common import records_of
from protocols.rocketmq.message_encoding import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    from_record,
    to_record,
)
from protocols.rocketmq.topic_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC, to_storage

log = logging.getLogger("ledgerwire.rocketmq.held")

HELD_LAYOUT_PATH = "/ledgerwire/rocketmq/held_layout"
MOVED_PROPERTY = "__LEDGERWIRE_MOVED"  # "<target layout>/<source partition>/<source offset>"
MOVED_DECISION = b"m"
CHUNK_BYTES = 1 << 20  # read and copied at a time: a large backlog is never in memory at once


async def held_layout(store: MetadataStore, bundles: int, shape: int) -> int:
    """The layout the held topics are in (1, or `bundles`), as the shape starting now (`shape`,
    the same numbers) finds it.  Not recorded yet (a directory from before this record): the
    other shape's if its RocketMQ offsets ledger(s) exist (it ran last; the offsets move
    (offset_layout.py) deletes them last), else this shape's; recorded so."""
    try:
        data, _ = await store.get(HELD_LAYOUT_PATH)
        return int(data)
    except NoNodeError:
        pass
    other = 1 if shape != 1 else bundles
    names = ([ROCKETMQ_OFFSETS_LEDGER] if other == 1
             else [bundle_ledger_name(b) for b in range(bundles)])
    layout = shape
    for name in names:
        if await store.exists(managed_ledger_path(DEFAULT_ROOT, name)) is not None:
            layout = other
    try:
        await store.create(HELD_LAYOUT_PATH, str(layout).encode(), make_parents=True)
    except NodeExistsError:
        data, _ = await store.get(HELD_LAYOUT_PATH)
        return int(data)
    return layout


async def record_layout(store: MetadataStore, layout: int) -> None:
    _, stat = await store.get(HELD_LAYOUT_PATH)
    await store.set(HELD_LAYOUT_PATH, str(layout).encode(), stat.version)


async def move_held_messages(store: MetadataStore, factory: ManagedLedgerFactory,
                             ledger_config: ManagedLedgerConfig | None, topics: Any,
                             delay_levels: str, source: int, target: int) -> None:
    """Move the held messages from layout `source` into `target` and record `target`; the
    RocketMQ offsets (the scan positions) must sit in the single ledger now."""
    if source == target:
        return
    if not await factory.exists(ROCKETMQ_OFFSETS_LEDGER):
        log.warning("held RocketMQ messages not moved: no scan positions to move them from")
    else:
        offsets = RocketMQOffsets(LedgerOffsetStore(factory, ledger_config,
                                                    ledger_name=ROCKETMQ_OFFSETS_LEDGER))
        await offsets.load()
        try:
            await move_held(topics, offsets, len(parse_delay_levels(delay_levels)), source,
                            target)
        finally:
            await offsets.close()
    crash_point("held_layout.before_record")
    await record_layout(store, target)


class _Layout:
    """Where one shape keeps held messages (`bundles` 1: the one-process standalone)."""

    def __init__(self, bundles: int, topics: Any) -> None:
        self.bundles = bundles
        self._topics = topics

    def queue_partitions(self, storage_topic: str, bundle: int) -> list[int]:
        info = self._topics.topics().get(storage_topic)
        n = info.partitions if info is not None else 0
        if self.bundles == 1:
            return list(range(n))
        return [p for p in range(n) if bundle_of(storage_topic, p, self.bundles) == bundle]

    def real_partition(self, source_partition: int, props: dict[str, str]) -> int | None:
        """The real topic's partition a held message (in `source_partition`) goes to."""
        topic = to_storage(props.get(PROPERTY_REAL_TOPIC, ""))
        queue = int(props.get(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        parts = self.queue_partitions(topic, source_partition % self.bundles)
        return parts[queue] if 0 <= queue < len(parts) else None

    def place(self, props: dict[str, str], real: int | None) -> int:
        """The bundle the held message goes to; REAL_QID translated in `props`."""
        if real is None or self.bundles == 1:
            if real is not None:
                props[PROPERTY_REAL_QUEUE_ID] = str(real)
            return 0
        topic = to_storage(props.get(PROPERTY_REAL_TOPIC, ""))
        bundle = bundle_of(topic, real, self.bundles)
        props[PROPERTY_REAL_QUEUE_ID] = str(self.queue_partitions(topic, bundle).index(real))
        return bundle


async def _span(topics: Any, topic: str, partition: int, start: int | None,
                end: int | None = None) -> tuple[Any, int, int]:
    """(log, first offset, end) of the partition's records from `start` (None: its log start)
    to `end` (None: its high watermark now); read them with _chunk."""
    plog = await topics.partition(topic, partition)
    offset = plog.log_start_offset if start is None or start < plog.log_start_offset else start
    return plog, offset, plog.high_watermark if end is None else end


async def _chunk(plog: Any, offset: int, end: int) -> list[Record]:
    """About CHUNK_BYTES of records from `offset` on, before `end` (none: the span is read)."""
    if offset >= end:
        return []
    return [r for r in records_of(await plog.read(offset, CHUNK_BYTES), offset) if r.offset < end]


async def _grow(topics: Any, topic: str, partitions: int) -> None:
    info = await topics.refresh_topic(topic)
    if info is not None and info.partitions < partitions:
        await topics.create_partitions(topic, partitions)


class HeldMove:
    """One move of the held topics from layout `source` to layout `target` (module docstring)."""

    def __init__(self, topics: Any, offsets: Any, levels: int, source: int, target: int) -> None:
        self.topics = topics
        self.offsets = offsets  # RocketMQOffsets of the single ledger
        self.levels = levels
        self.source = _Layout(source, topics)
        self.target = _Layout(target, topics)
        self.moved = 0

    def _tag(self, partition: int, offset: int) -> str:
        return f"{self.target.bundles}/{partition}/{offset}"

    async def run(self) -> int:
        queues = self.levels + 1
        names = self.topics.topics()
        if to_storage(SCHEDULE_TOPIC) in names:
            await _grow(self.topics, SCHEDULE_TOPIC, queues * self.target.bundles)
            await self._move_schedule(queues)
        if HALF_TOPIC in names:
            await _grow(self.topics, HALF_TOPIC, self.target.bundles)
            # a decision for each half partition (an older version may have left fewer)
            wanted = max(self.target.bundles, self.topics.topics()[HALF_TOPIC].partitions)
            if OP_HALF_TOPIC in names:
                await _grow(self.topics, OP_HALF_TOPIC, wanted)
            else:
                await self.topics.create_topic(OP_HALF_TOPIC, wanted)
            await self._move_half()
        return self.moved

    async def _survey(self, topic: str, group: str) -> tuple[
            dict[int, tuple[int | None, int]], set[tuple[int, int]], set[tuple[int, int]]]:
        """Per partition, what the source layout still holds there: (its scan position, where
        the copies an interrupted move made begin, else the high watermark; sources never
        follow copies); the sources that have a copy already; the recalled timer messages
        ((partition, offset): their recall markers are not copied, nor are they)."""
        spans: dict[int, tuple[int | None, int]] = {}
        copied: set[tuple[int, int]] = set()
        recalled: set[tuple[int, int]] = set()
        mine = f"{self.target.bundles}/"
        for partition in range(self.topics.topics()[topic].partitions):
            start = self.offsets.query(group, topic, partition)
            plog, offset, end = await _span(self.topics, topic, partition, start)
            while records := await _chunk(plog, offset, end):
                offset = records[-1].offset + 1
                for record in records:
                    _, props, _ = from_record(record)
                    tag = props.get(MOVED_PROPERTY, "")
                    if tag.startswith(mine):
                        _, p, o = tag.split("/")
                        copied.add((int(p), int(o)))
                        end = min(end, record.offset)
                    elif RECALL_PROPERTY in props:
                        recalled.add((partition, int(props[RECALL_PROPERTY])))
            spans[partition] = (start, end)
        return spans, copied, recalled

    async def _append(self, topic: str, by_partition: dict[int, list[Record]]) -> None:
        for partition in sorted(by_partition):
            plog = await self.topics.partition(topic, partition)
            await plog.append_built(built_batch(by_partition[partition]))
            self.moved += len(by_partition[partition])
            crash_point("held_layout.after_append")

    def _copy(self, partition: int, record: Record) -> tuple[int, Record]:
        """The copy of a held record and the bundle it goes to."""
        body, props, meta = from_record(record)
        bundle = self.target.place(props, self.source.real_partition(partition, props))
        props[MOVED_PROPERTY] = self._tag(partition, record.offset)
        return bundle, to_record(body, props, meta, record.timestamp)

    async def _move_schedule(self, queues: int) -> None:
        info = self.topics.topics()[SCHEDULE_TOPIC]
        sources = range(info.partitions if self.source.bundles > 1
                        else min(queues, info.partitions))
        spans, copied, recalled = await self._survey(SCHEDULE_TOPIC, SCHEDULE_GROUP)
        for partition in sources:
            start, end = spans[partition]
            queue = partition // self.source.bundles
            plog, offset, end = await _span(self.topics, SCHEDULE_TOPIC, partition, start, end)
            while records := await _chunk(plog, offset, end):
                offset = records[-1].offset + 1
                out: dict[int, list[Record]] = {}
                for record in records:
                    _, props, _ = from_record(record)
                    if ((partition, record.offset) in recalled or RECALL_PROPERTY in props
                            or PROPERTY_REAL_TOPIC not in props
                            or (partition, record.offset) in copied):
                        continue
                    bundle, copy = self._copy(partition, record)
                    out.setdefault(queue * self.target.bundles + bundle, []).append(copy)
                await self._append(SCHEDULE_TOPIC, out)
        for partition in sources:  # the scan passes what was moved (copies follow sources)
            _, end = spans[partition]
            if self.offsets.query(SCHEDULE_GROUP, SCHEDULE_TOPIC, partition) != end:
                await self.offsets.commit(SCHEDULE_GROUP, SCHEDULE_TOPIC, partition, end)
                crash_point("held_layout.after_position")

    async def _move_half(self) -> None:
        sources = range(1 if self.source.bundles == 1 else self.source.bundles)
        spans, copied, _ = await self._survey(HALF_TOPIC, SCAN_GROUP)
        now = int(time.time() * 1000)
        for partition in sources:
            if partition not in spans:
                continue
            resolved: set[int] = set()
            ops, offset, end = await _span(self.topics, OP_HALF_TOPIC, partition, None)
            while decisions := await _chunk(ops, offset, end):
                offset = decisions[-1].offset + 1
                resolved.update(int(r.value or b"-1") for r in decisions)
            start, end = spans[partition]
            plog, offset, end = await _span(self.topics, HALF_TOPIC, partition, start, end)
            while records := await _chunk(plog, offset, end):
                offset = records[-1].offset + 1
                out: dict[int, list[Record]] = {}
                decided: list[Record] = []
                for record in records:
                    if record.offset in resolved:
                        continue
                    if (partition, record.offset) not in copied:
                        bundle, copy = self._copy(partition, record)
                        out.setdefault(bundle, []).append(copy)
                    decided.append(Record(0, now, MOVED_DECISION, str(record.offset).encode(),
                                          []))
                await self._append(HALF_TOPIC, out)  # durable before the old ones are decided
                if decided:
                    await ops.append_built(built_batch(decided))
                    crash_point("held_layout.after_decisions")


async def move_held(topics: Any, offsets: Any, levels: int, source: int, target: int) -> int:
    """Move what the held topics hold pending from layout `source` to `target`; how many."""
    moved = await HeldMove(topics, offsets, levels, source, target).run()
    if moved:
        log.info("moved %d held RocketMQ messages (delayed, undecided transactional) from the "
                 "%s layout to the %s layout", moved, _name(source), _name(target))
    return moved


def _name(layout: int) -> str:
    return "one-process" if layout == 1 else f"{layout}-bundle"
