"""Delayed delivery for RocketMQ delay levels, durable across restarts.

A delayed message (property DELAY = level, or a retry sent back by a consumer) is first
appended to partition level-1 of the topic SCHEDULE_TOPIC_XXXX, with its real topic and queue
in REAL_TOPIC / REAL_QID.  One task per level reads that partition in order (all messages of
one level share one delay, so they come due in append order), sleeps until the head is due
(store time + delay), appends it to its real queue, and commits the scan position under the
internal group __ledgerwire_schedule in the RocketMQ offset store.  A restart resumes at the
committed position; a crash between the delivery and the commit delivers that message again
(at least once, as RocketMQ does).

Messages with an arbitrary delivery time (__STARTDELIVERTIME from ali-ons, TIMER_DELIVER_MS /
TIMER_DELAY_SEC / TIMER_DELAY_MS from RocketMQ 5 clients) wait in one more partition (index =
number of levels) in arrival order, not due order: its task keeps up to TIMER_WINDOW of them in
a heap by due time and commits the position up to which everything was delivered (a restart
re-delivers the ones delivered beyond that position: at least once again).

A message waiting in the timer queue can be recalled (RocketMQ 5's RecallMessage) until it is
delivered: `recall` appends a marker naming its offset to the same queue, durable before it
answers, and the timer task drops the message when it comes due.  The check and the marker are
made under the lock the timer task delivers under, so a recall either wins (never delivered) or
is refused because the message was already delivered.  A restart re-reads the markers with the
messages they name (a marker always lies after its message, so never behind the committed
position while its message is not delivered).

This module must never deliver a message before its delay passed, nor one whose recall it
acknowledged.
"""

from __future__ import annotations

import heapq
import logging
import time

import trio

from ledger_backend.faults import log_failure
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import Record
from protocols.rocketmq.delay_levels import TIMER_PROPERTIES, clamp_level, parse_delay_levels
from protocols.rocketmq.errors import MessageIllegalError, RocketMQError, TopicNotExistError
from protocols.rocketmq.handlers.common import get_queue, records_of
from protocols.rocketmq.handlers.send import append_records
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    MessageMeta,
    from_record,
    to_record,
)
from protocols.rocketmq.topic_names import SCHEDULE_TOPIC, to_storage

log = logging.getLogger("ledgerwire.rocketmq.delays")

SCHEDULE_GROUP = "__ledgerwire_schedule"
RETRY_PAUSE_S = 1.0
# how long a recall waits for the timer task to start: a bundle's scheduler starts only once it
# sees the schedule topic, which the first timed send (perhaps through another broker) creates
TIMER_START_WAIT_S = 10.0
TIMER_WINDOW = 100_000
DELIVER_AT_PROPERTY = TIMER_PROPERTIES[1]  # TIMER_DELIVER_MS, normalised at schedule time
RECALL_PROPERTY = "__LEDGERWIRE_RECALL"  # a recall marker: the timer queue offset it drops


class RecallRefusedError(Exception):
    """The scheduled message cannot be recalled (unknown, or already delivered)."""


class SchedulerNotRunningError(Exception):
    """The timer queue is not delivered by this broker now (starting, or a bundle elsewhere)."""


class DelayScheduler:
    def __init__(self, broker: object, levels: str) -> None:
        self.broker = broker
        self.levels = parse_delay_levels(levels)
        # the timer task's state, shared with `recall` under `_timer_lock`
        self._timer_lock = trio.Lock()
        self._timer_committed: int | None = None  # None: the timer task is not running
        self._timer_started = trio.Event()  # set while it runs
        self._timer_delivered: set[int] = set()  # offsets delivered beyond the committed one
        self._recalled: set[int] = set()  # offsets whose recall marker is durable

    async def _ensure_topic(self) -> None:
        queues = len(self.levels) + 1  # one per level, then the timer queue
        info = await self.broker.ensure_topic(  # type: ignore[attr-defined]
            to_storage(SCHEDULE_TOPIC), queues)
        if info.partitions < queues:
            await self.broker.topics.create_partitions(  # type: ignore[attr-defined]
                to_storage(SCHEDULE_TOPIC), queues)

    async def schedule(self, topic: str, queue_id: int, body: bytes, props: dict[str, str],
                       meta: MessageMeta, born_ts: int, level: int) -> tuple[int, int]:
        """Hold a message for `level`; returns (schedule queue, offset) where it waits."""
        await self._ensure_topic()
        level = clamp_level(level, self.levels)
        held = dict(props)
        held[PROPERTY_REAL_TOPIC] = topic
        held[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        held[PROPERTY_DELAY] = str(level)
        meta.store_timestamp = int(time.time() * 1000)
        offset = await append_records(self.broker, SCHEDULE_TOPIC, level - 1,  # type: ignore[arg-type]
                                      [to_record(body, held, meta, born_ts)])
        return level - 1, offset

    @property
    def timer_queue(self) -> int:
        return len(self.levels)

    async def schedule_at(self, topic: str, queue_id: int, body: bytes, props: dict[str, str],
                          meta: MessageMeta, born_ts: int, deliver_at_ms: int) -> tuple[int, int]:
        """Hold a message until a wall-clock time; returns (timer queue, offset)."""
        await self._ensure_topic()
        held = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
        held[PROPERTY_REAL_TOPIC] = topic
        held[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        held[DELIVER_AT_PROPERTY] = str(deliver_at_ms)
        meta.store_timestamp = int(time.time() * 1000)
        offset = await append_records(self.broker, SCHEDULE_TOPIC,  # type: ignore[arg-type]
                                      self.timer_queue, [to_record(body, held, meta, born_ts)])
        return self.timer_queue, offset

    async def run(self) -> None:
        await self._ensure_topic()
        async with trio.open_nursery() as nursery:
            for level in range(1, len(self.levels) + 1):
                nursery.start_soon(self._run_level, level)
            nursery.start_soon(self._run_level, 0)  # 0: the timer queue

    async def _deliver(self, record: Record, props: dict[str, str], body: bytes,
                       meta: MessageMeta) -> None:
        topic = props.pop(PROPERTY_REAL_TOPIC, None)
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        props.pop(PROPERTY_DELAY, None)
        props.pop(DELIVER_AT_PROPERTY, None)
        if topic is None:
            return
        meta.store_timestamp = int(time.time() * 1000)
        try:
            await append_records(self.broker, topic, queue_id,  # type: ignore[arg-type]
                                 [to_record(body, props, meta, record.timestamp)])
        except (TopicNotExistError, MessageIllegalError):
            log.warning("dropping delayed message for %s-%d", topic, queue_id, exc_info=True)

    async def _deliver_timers(self) -> None:
        broker = self.broker
        queue = self.timer_queue
        offsets = broker.offsets  # type: ignore[attr-defined]
        plog = await get_queue(broker, SCHEDULE_TOPIC, queue)  # type: ignore[arg-type]
        committed = offsets.query(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue)
        if committed is None or committed < plog.log_start_offset:
            committed = plog.log_start_offset
        scan = committed
        heap: list[tuple[int, int, Record]] = []
        delivered: set[int] = set()
        async with self._timer_lock:
            self._timer_committed, self._timer_delivered = committed, delivered
            self._recalled = set()  # rebuilt from the markers scanned below
            self._timer_started.set()
        try:
            while True:
                plog = await get_queue(broker, SCHEDULE_TOPIC, queue)  # type: ignore[arg-type]
                while scan < plog.high_watermark and len(heap) < TIMER_WINDOW:
                    records = records_of(await plog.read(scan, 1 << 20), scan)
                    if not records:
                        break
                    for record in records:
                        _, props, _ = from_record(record)
                        scan = record.offset + 1
                        if RECALL_PROPERTY in props:
                            self._recalled.add(int(props[RECALL_PROPERTY]))
                            delivered.add(record.offset)  # nothing to deliver
                            continue
                        due = int(props.get(DELIVER_AT_PROPERTY, "0") or 0)
                        heapq.heappush(heap, (due, record.offset, record))
                now_ms = time.time() * 1000
                async with self._timer_lock:
                    while heap and heap[0][0] <= now_ms:
                        _, offset, record = heapq.heappop(heap)
                        if offset in self._recalled:
                            self._recalled.discard(offset)
                        else:
                            body, props, meta = from_record(record)
                            await self._deliver(record, props, body, meta)
                        delivered.add(offset)
                    moved = committed
                    while moved in delivered:
                        delivered.discard(moved)
                        moved += 1
                    if moved != committed:
                        await offsets.commit(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue, moved)
                        committed = self._timer_committed = moved
                wait_s = 5.0 if not heap else max(0.0, min(5.0, (heap[0][0] - now_ms) / 1000))
                if wait_s > 0:
                    await plog.wait_for_data(scan, wait_s)
        finally:
            self._timer_committed = None
            self._timer_started = trio.Event()

    async def recall(self, topic: str, offset: int, message_id: str) -> None:
        """Drop the message waiting at `offset` of the timer queue (see the docstring)."""
        queue = self.timer_queue
        plog = await get_queue(self.broker, SCHEDULE_TOPIC, queue)  # type: ignore[arg-type]
        target = next((r for r in records_of(await plog.read(offset, 1 << 16), offset)
                       if r.offset == offset), None)
        if target is None:
            raise RecallRefusedError("no scheduled message has this recall handle")
        _, props, meta = from_record(target)
        if (props.get(PROPERTY_REAL_TOPIC) != topic or RECALL_PROPERTY in props
                or props.get(PROPERTY_UNIQ_KEY) != message_id):
            raise RecallRefusedError("the recall handle names another message")
        with trio.move_on_after(TIMER_START_WAIT_S):  # a first timed send, just made
            await self._timer_started.wait()
        async with self._timer_lock:
            committed = self._timer_committed
            if committed is None:
                raise SchedulerNotRunningError("timed messages are not delivered here now")
            if offset in self._recalled:
                return  # recalled before: the same answer
            if offset < committed or offset in self._timer_delivered:
                raise RecallRefusedError(f"message {message_id} is no longer waiting "
                                         "(delivered, or recalled and past its time)")
            marker = MessageMeta(born_host=meta.born_host, store_timestamp=int(time.time() * 1000))
            await append_records(self.broker, SCHEDULE_TOPIC, queue,  # type: ignore[arg-type]
                                 [to_record(b"", {RECALL_PROPERTY: str(offset)}, marker,
                                            marker.store_timestamp)])
            self._recalled.add(offset)
        log.info("scheduled message %s of %s recalled", message_id, topic)

    async def _run_level(self, level: int) -> None:
        while True:
            try:
                if level == 0:
                    await self._deliver_timers()
                else:
                    await self._deliver_level(level)
            except (RocketMQError, KafkaProtocolError):
                log_failure(log, "delay level %d: delivery failed, retrying", level)
                await trio.sleep(RETRY_PAUSE_S)

    async def _deliver_level(self, level: int) -> None:
        broker = self.broker
        queue = level - 1
        delay_ms = int(self.levels[queue] * 1000)
        offsets = broker.offsets  # type: ignore[attr-defined]
        while True:
            plog = await get_queue(broker, SCHEDULE_TOPIC, queue)  # type: ignore[arg-type]
            offset = offsets.query(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue)
            if offset is None or offset < plog.log_start_offset:
                offset = plog.log_start_offset
            if offset >= plog.high_watermark:
                await plog.wait_for_data(offset, 5.0)
                continue
            for record in records_of(await plog.read(offset, 1 << 20), offset):
                body, props, meta = from_record(record)
                due_ms = meta.store_timestamp + delay_ms
                wait_s = (due_ms - time.time() * 1000) / 1000
                if wait_s > 0:
                    await trio.sleep(wait_s)
                await self._deliver(record, props, body, meta)
                await offsets.commit(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue, record.offset + 1)
