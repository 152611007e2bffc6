"""RocketMQ 5 receiving: ReceiveMessage, AckMessage, ChangeInvisibleDuration and the dead-letter
queue, on the per-record delivery engine (gateway/delivery).

A receive acquires records of the topic's queues for the calling client with the requested
invisible duration as the lock, starting at the queue the client chose and going on to the
others (RocketMQ 5's pop takes from any queue of the broker).  Records the request's tag filter
(or SQL92 filter, protocols/rocketmq/sql_filter.py) does not match are accepted at once, as the
4.x pull path skips them.  Each acquisition counts a delivery attempt; a record acquired more
often than the group's max attempts (its
subscription group's retryMaxTimes + 1, RocketMQ's default 17) is copied to `%DLQ%<group>` and
then accepted, so it is never lost between the two (a crash in between copies it again).  After
acknowledgements the group's 4.x committed offset follows the engine's start offset (within
about a second), so 4.x tools, lag and a 4.x consumer of the same group see one progress.

A FIFO group (its subscription group's `consumeMessageOrderly`) gets nothing more from a queue
while any of that queue's records is in flight to it: the producer puts a message group in one
queue, so a group's next message waits until the previous one is acknowledged, or comes back
after its invisible duration.

A new group starts at its 4.x committed offset when it has one, else at the log start: a
consumer started after its producer still gets what was sent before it subscribed.

This module must never hand a record to a client before its acquisition is durable, and never
accept a record bound for the dead-letter queue before the copy there is durable.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable

import trio

from gateway.delivery.delivery_service import DeliveryService, NotOwnedError
from gateway.delivery.delivery_state import AckBatch, AckType, AcquiredRange, DeliverySettings
from gateway.rocketmq.bundle_logs import BundleNotServedError
from gateway.rocketmq.service import RocketMQBroker
from protocols.kafka.record_batch import Record, parse_header
from protocols.rocketmq.grpc.backend import Caller, ReceiveRequest
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.messages import (
    Delivered,
    Receipt,
    parse_receipt_handle,
    receipt_handle,
)
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.handlers.common import find_topic, get_queue, iter_records
from protocols.rocketmq.handlers.send import append_records
from protocols.rocketmq.handlers.subscription_groups import stored_config
from protocols.rocketmq.message_encoding import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageMeta,
    from_record,
    to_record,
)
from protocols.rocketmq.message_id import commit_log_offset, offset_message_id
from protocols.rocketmq.subscription import parse_tag_expression
from protocols.rocketmq.topic_names import dlq_topic, to_storage

log = logging.getLogger("ledgerwire.rocketmq.grpc")

READ_BYTES = 4 * 1024 * 1024  # per queue per receive: bounds a receive's memory
READ_HINT_BYTES = 4096  # bytes asked per wanted record (a read gives at least one batch)
POP_LEDGER_PREFIX = "__system/rocketmq-pop"
FOLLOW_INTERVAL_S = 1.0
_nonces = itertools.count(1)


def pop_ledger_name(topic: str, partition: int) -> str:
    return f"{POP_LEDGER_PREFIX}/{topic}-{partition}"


class GrpcReceiver:
    def __init__(self, broker: RocketMQBroker, delivery: DeliveryService) -> None:
        self.broker = broker
        self.delivery = delivery
        self._progress_dirty: set[tuple[str, str, int]] = set()
        self._progress_wake = trio.Event()

    async def run(self) -> None:
        """Background work: the 4.x committed offsets follow the engine at most once per
        FOLLOW_INTERVAL_S per queue (the engine's own state is what a restart reloads; the
        committed offset is for 4.x tools, lag and a group starting over)."""
        while True:
            await self._progress_wake.wait()
            self._progress_wake = trio.Event()
            dirty, self._progress_dirty = self._progress_dirty, set()
            for group, topic, queue_id in sorted(dirty):
                try:
                    await self._commit_progress(group, topic, queue_id)
                except (BundleNotServedError, NotOwnedError):
                    pass  # a cluster bundle moved away: its new owner follows from its state
                except Exception:  # noqa: BLE001 - a storage fault: next time
                    log.warning("%s: offset of %s-%d not committed yet", group, topic, queue_id)
                    self._progress_dirty.add((group, topic, queue_id))
            await trio.sleep(FOLLOW_INTERVAL_S)

    @staticmethod
    def build_delivery(broker: RocketMQBroker, factory: object, config: object, *,
                       ledger_name: Callable[[str, int], str] = pop_ledger_name,
                       owns: Callable[[str, int], bool] | None = None) -> DeliveryService:
        """The engine instance RocketMQ 5 consumers use: its own ledgers, and per group a
        delivery limit two past the max attempts (the extra acquisitions are the dead-letter
        step, taken again if a crash interrupts it).  A cluster's bundle names its logs after
        the storage partition and serves only while it owns the bundle (`owns`)."""

        def settings_for(group: str) -> DeliverySettings:
            return DeliverySettings(lock_duration_ms=30_000,
                                    delivery_count_limit=_max_attempts(broker, group) + 2,
                                    max_in_flight=20_000)

        return DeliveryService(factory, config, settings_for=settings_for,  # type: ignore[arg-type]
                               ledger_name=ledger_name, owns=owns)

    def max_attempts(self, group: str) -> int:
        return _max_attempts(self.broker, group)

    def is_fifo(self, group: str) -> bool:
        """A FIFO group (its subscription group's consumeMessageOrderly, as RocketMQ 5's)."""
        stored = stored_config(self.broker, group)
        return bool(stored is not None and stored.get("consumeMessageOrderly"))

    # ---- receive ------------------------------------------------------------------------
    async def receive(self, caller: Caller, req: ReceiveRequest) -> list[Delivered]:
        info = await find_topic(self.broker, req.topic)
        queues = list(range(info.partitions))
        if 0 <= req.queue_id < len(queues):
            queues = queues[req.queue_id:] + queues[:req.queue_id]
        tags = parse_tag_expression(req.tag_expression)
        sql = req.sql
        wanted: Callable[[dict[str, str]], bool] = (
            sql.matches if sql is not None
            else lambda props: tags.matches(props.get(PROPERTY_TAGS)))
        fifo = self.is_fifo(req.group)
        deadline = trio.current_time() + req.long_poll_ms / 1000
        while True:
            out: list[Delivered] = []
            for queue_id in queues:
                if len(out) >= req.batch_size:
                    break
                if fifo and await self._busy(req, queue_id):
                    continue
                out += await self._take(caller, req, queue_id, req.batch_size - len(out), wanted)
            remaining = deadline - trio.current_time()
            if out or remaining <= 0:
                return out
            await self._wait(req, queues, remaining)

    async def _busy(self, req: ReceiveRequest, queue_id: int) -> bool:
        """FIFO: a queue with records in flight gives nothing more until they are settled (a
        message group lives in one queue, so its next message waits for the previous one)."""
        view = await self.delivery.view(req.group, to_storage(req.topic), queue_id)
        return view is not None and view.acquired > 0

    async def _wait(self, req: ReceiveRequest, queues: list[int], timeout_s: float) -> None:
        """Until a queue has new data or a record of the group may be available again."""
        storage = to_storage(req.topic)
        async with trio.open_nursery() as nursery:
            async def first(fn: object, *args: object) -> None:
                await fn(*args)  # type: ignore[operator]
                nursery.cancel_scope.cancel()

            for queue_id in queues:
                plog = await get_queue(self.broker, req.topic, queue_id)
                view = await self.delivery.view(req.group, storage, queue_id)
                end = view.end_offset if view is not None else plog.high_watermark
                nursery.start_soon(first, plog.wait_for_data, end, timeout_s)
                nursery.start_soon(first, self.delivery.wait_for_change, storage, queue_id,
                                   req.group, math.ceil(timeout_s * 1000))

    async def _take(self, caller: Caller, req: ReceiveRequest, queue_id: int, budget: int,
                    wanted: Callable[[dict[str, str]], bool]) -> list[Delivered]:
        storage = to_storage(req.topic)
        plog = await get_queue(self.broker, req.topic, queue_id)
        committed = self.broker.offsets.query(req.group, req.topic, queue_id)
        ranges = await self.delivery.acquire(
            req.group, storage, queue_id, caller.client_id, budget,
            fetchable_end=plog.high_watermark, log_start=plog.log_start_offset,
            start_at=committed if committed is not None else plog.log_start_offset,
            lock_ms=req.invisible_ms)
        if not ranges:
            return []
        counts = {o: r.delivery_count for r in ranges for o in range(r.first, r.last + 1)}
        records = await self._read(req.topic, queue_id, ranges)
        limit = self.max_attempts(req.group)
        delivered: list[Delivered] = []
        settle: list[tuple[int, int]] = []  # (offset, delivery count) to accept now
        for offset in sorted(counts):
            record = records.get(offset)
            count = counts[offset]
            if record is None:  # a control record or a gap: nothing to deliver
                settle.append((offset, count))
                continue
            body, props, meta = from_record(record)
            if count > limit:
                await self._dead_letter(req.group, req.topic, queue_id, record)
                settle.append((offset, count))
            elif not wanted(props):
                settle.append((offset, count))
            else:
                delivered.append(self._delivered(req, queue_id, record, body, props, meta,
                                                 count))
        if settle:
            await self.delivery.acknowledge(req.group, storage, queue_id, caller.client_id, [
                AckBatch(o, o, (AckType.ACCEPT,), delivery_count=c) for o, c in settle])
            await self._follow_progress(req.group, req.topic, queue_id)
        return delivered

    async def _read(self, topic: str, queue_id: int,
                    ranges: list[AcquiredRange]) -> dict[int, Record]:
        """The records of the acquired ranges: reads sized to the ranges, and records decoded
        only up to each range's end (a read returns whole batches past it)."""
        plog = await get_queue(self.broker, topic, queue_id)
        found: dict[int, Record] = {}
        for r in ranges:
            offset = r.first
            while offset <= r.last:
                want = min(READ_BYTES, READ_HINT_BYTES * (r.last - offset + 1))
                batches = await plog.read(offset, want)
                if not batches:
                    break
                for record in iter_records(batches, offset):
                    if record.offset > r.last:
                        break
                    found[record.offset] = record
                offset = max(offset, parse_header(batches[-1]).last_offset + 1)
        return found

    def _delivered(self, req: ReceiveRequest, queue_id: int, record: Record, body: bytes,
                   props: dict[str, str], meta: MessageMeta, count: int) -> Delivered:
        cfg = self.broker.config
        fallback = offset_message_id(cfg.advertised_host, cfg.advertised_port,
                                     commit_log_offset(req.topic, queue_id, record.offset))
        return Delivered(req.topic, queue_id, record.offset, body, props, meta, record.timestamp,
                         count, receipt_handle(queue_id, record.offset, count, next(_nonces)),
                         req.invisible_ms, fallback)

    # ---- acknowledgements ---------------------------------------------------------------
    async def ack(self, group: str, topic: str, handle: str) -> None:
        receipt = parse_receipt_handle(handle)
        await self._settle(group, topic, receipt.partition, receipt.offset,
                           receipt.delivery_count, AckType.ACCEPT, None)
        await self._follow_progress(group, topic, receipt.partition)

    async def ack_many(self, group: str, topic: str,
                       handles: list[str]) -> list[Exception | None]:
        """Acknowledge several handles: each queue's in one durable write of the engine (all
        or nothing there), and one by one only when that write refuses some of them, so each
        handle gets its own answer."""
        refusals: list[Exception | None] = [None] * len(handles)
        by_queue: dict[int, list[tuple[int, Receipt]]] = {}
        for index, handle in enumerate(handles):
            try:
                receipt = parse_receipt_handle(handle)
            except RpcFailure as exc:
                refusals[index] = exc
                continue
            by_queue.setdefault(receipt.partition, []).append((index, receipt))
        for queue_id, items in by_queue.items():
            items.sort(key=lambda item: item[1].offset)
            if len(items) > 1 and await self._settle_all(group, topic, queue_id, items):
                await self._follow_progress(group, topic, queue_id)
                continue
            for index, _receipt in items:
                try:
                    await self.ack(group, topic, handles[index])
                except Exception as exc:  # noqa: BLE001 - this handle's answer
                    refusals[index] = exc
        return refusals

    async def _settle_all(self, group: str, topic: str, queue_id: int,
                          items: list[tuple[int, Receipt]]) -> bool:
        try:
            await get_queue(self.broker, topic, queue_id)
        except Exception:  # noqa: BLE001 - answered handle by handle
            return False
        result = await self.delivery.acknowledge(
            group, to_storage(topic), queue_id, None,
            [AckBatch(r.offset, r.offset, (AckType.ACCEPT,), delivery_count=r.delivery_count)
             for _, r in items])
        return not result.error

    async def change_invisible(self, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str:
        receipt = parse_receipt_handle(handle)
        kind = AckType.RENEW if invisible_ms > 0 else AckType.RELEASE
        await self._settle(group, topic, receipt.partition, receipt.offset,
                           receipt.delivery_count, kind, invisible_ms)
        return receipt_handle(receipt.partition, receipt.offset, receipt.delivery_count,
                              next(_nonces))

    async def forward_to_dead_letter(self, group: str, topic: str, handle: str) -> None:
        receipt = parse_receipt_handle(handle)
        plog = await get_queue(self.broker, topic, receipt.partition)
        batches = await plog.read(receipt.offset, READ_HINT_BYTES)
        record = next((r for r in iter_records(batches, receipt.offset)
                       if r.offset == receipt.offset), None)
        if record is None:
            raise RpcFailure(pb.MESSAGE_NOT_FOUND, "the message is no longer stored")
        await self._dead_letter(group, topic, receipt.partition, record)
        await self.ack(group, topic, handle)

    async def _settle(self, group: str, topic: str, queue_id: int, offset: int, count: int,
                      kind: AckType, lock_ms: int | None) -> None:
        await get_queue(self.broker, topic, queue_id)
        result = await self.delivery.acknowledge(
            group, to_storage(topic), queue_id, None,
            [AckBatch(offset, offset, (kind,), delivery_count=count)], lock_ms=lock_ms)
        if result.error:
            raise RpcFailure(pb.INVALID_RECEIPT_HANDLE,
                             result.message or "the receipt handle has expired")

    async def _follow_progress(self, group: str, topic: str, queue_id: int) -> None:
        self._progress_dirty.add((group, topic, queue_id))
        self._progress_wake.set()

    async def _commit_progress(self, group: str, topic: str, queue_id: int) -> None:
        view = await self.delivery.view(group, to_storage(topic), queue_id)
        if view is None:
            return
        committed = self.broker.offsets.query(group, topic, queue_id)
        if committed is None or view.start_offset > committed:
            await self.broker.offsets.commit(group, topic, queue_id, view.start_offset)

    async def _dead_letter(self, group: str, topic: str, queue_id: int, record: Record) -> None:
        body, props, meta = from_record(record)
        cfg = self.broker.config
        props.setdefault(PROPERTY_RETRY_TOPIC, topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, props.get(PROPERTY_UNIQ_KEY) or
                         offset_message_id(cfg.advertised_host, cfg.advertised_port,
                                           commit_log_offset(topic, queue_id, record.offset)))
        target = dlq_topic(group)
        await self.broker.ensure_topic(to_storage(target), 1)
        meta.reconsume_times = self.max_attempts(group)
        await append_records(self.broker, target, 0,
                             [to_record(body, props, meta, record.timestamp)])
        log.info("%s: message %s of %s-%d moved to %s after %d attempts", group,
                 props.get(PROPERTY_UNIQ_KEY, ""), topic, queue_id, target,
                 self.max_attempts(group))


def _max_attempts(broker: RocketMQBroker, group: str) -> int:
    stored = stored_config(broker, group)
    retries = stored["retryMaxTimes"] if stored is not None else broker.config.max_reconsume_times
    return int(retries) + 1
