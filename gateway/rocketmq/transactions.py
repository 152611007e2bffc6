"""RocketMQ transactional messages: half messages, END_TRANSACTION, and check-back.

A prepared message is appended to RMQ_SYS_TRANS_HALF_TOPIC (invisible to consumers of its real
topic) with REAL_TOPIC / REAL_QID / PGROUP properties.  END_TRANSACTION commit copies it to its
real queue (through the delay scheduler if it has a delay level); commit and rollback both
append a decision record (value: the half offset) to RMQ_SYS_TRANS_OP_HALF_TOPIC, which is
replayed at start so decisions survive restarts.  A background scan walks the half topic from
the committed position (internal group __ledgerwire_transactions): a half message older than
`check_timeout_s` with no decision is checked back with a producer of its group
(CHECK_TRANSACTION_STATE, oneway, on the producer's connection), every `check_interval_s`, at
most `max_checks` times, after which it is rolled back.  Check counts live in memory (a restart
starts counting again).

This module must never make a half message visible without a commit decision.
"""

from __future__ import annotations

import logging
import time

import trio

from ledger_backend.faults import log_failure
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import Record
from protocols.rocketmq.codec import make_request
from protocols.rocketmq.errors import (
    MessageIllegalError,
    NoPermissionError,
    RocketMQError,
    TopicNotExistError,
)
from protocols.rocketmq.handlers.common import get_queue, records_of, stored_message
from protocols.rocketmq.handlers.messages import read_one
from protocols.rocketmq.handlers.send import append_records
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_TRANSACTION_COMMIT,
    SYS_FLAG_TRANSACTION_MASK,
    SYS_FLAG_TRANSACTION_PREPARED,
    MessageMeta,
    encode_stored_message,
    from_record,
    to_record,
)
from protocols.rocketmq.message_id import (
    commit_log_offset,
    decode_commit_log_offset,
    offset_message_id,
    topic_hash,
)
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import HALF_TOPIC, to_storage
from protocols.rocketmq.topic_names import OP_HALF_TOPIC as OP_TOPIC

log = logging.getLogger("ledgerwire.rocketmq.transactions")

SCAN_GROUP = "__ledgerwire_transactions"
COMMIT = 8
ROLLBACK = 12


class TransactionService:
    def __init__(self, broker: object, *, check_timeout_s: float = 6.0,
                 check_interval_s: float = 60.0, max_checks: int = 15,
                 scan_interval_s: float = 1.0) -> None:
        self.broker = broker
        self.check_timeout_s = check_timeout_s
        self.check_interval_s = check_interval_s
        self.max_checks = max_checks
        self.scan_interval_s = scan_interval_s
        self._resolved: set[int] = set()
        self._checks: dict[int, tuple[int, float]] = {}  # half offset -> (count, next check)
        self._lock = trio.Lock()

    async def load(self) -> None:
        """Create the internal topics and replay the decisions."""
        for topic in (HALF_TOPIC, OP_TOPIC):
            await self.broker.ensure_topic(to_storage(topic), 1)  # type: ignore[attr-defined]
        plog = await get_queue(self.broker, OP_TOPIC, 0)  # type: ignore[arg-type]
        offset = plog.log_start_offset
        while offset < plog.high_watermark:
            records = records_of(await plog.read(offset, 1 << 20), offset)
            if not records:
                break
            for record in records:
                self._resolved.add(int(record.value or b"-1"))
                offset = record.offset + 1

    async def prepare(self, topic: str, queue_id: int, producer_group: str, body: bytes,
                      props: dict[str, str], meta: MessageMeta, born_ts: int) -> int:
        half = dict(props)
        half[PROPERTY_REAL_TOPIC] = topic
        half[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        half[PROPERTY_TRANSACTION_PREPARED] = "true"
        half[PROPERTY_PRODUCER_GROUP] = producer_group
        meta.sys_flag = (meta.sys_flag & ~SYS_FLAG_TRANSACTION_MASK) | \
            SYS_FLAG_TRANSACTION_PREPARED
        return await append_records(self.broker, HALF_TOPIC, 0,  # type: ignore[arg-type]
                                    [to_record(body, half, meta, born_ts)])

    def half_offset(self, commit_offset: int) -> int:
        where = decode_commit_log_offset(commit_offset)
        if where.topic_hash != topic_hash(HALF_TOPIC):
            raise MessageIllegalError("commitLogOffset does not name a half message")
        return where.queue_offset

    async def end(self, commit_offset: int, decision: int, *, producer_group: str | None = None,
                  topic: str | None = None) -> None:
        """Apply a producer's decision (commit 8, rollback 12; others are ignored).  With
        `producer_group` (a 4.x END_TRANSACTION's, which the ACLs checked) or `topic` (a 5.x
        EndTransaction's), a half message of another group or topic is refused
        (NoPermissionError), as Apache's broker refuses a wrong producer group: the decision is
        the owner's alone."""
        if decision not in (COMMIT, ROLLBACK):
            return
        half_offset = self.half_offset(commit_offset)
        async with self._lock:
            if half_offset in self._resolved:
                return
            record = await read_one(self.broker, HALF_TOPIC, 0, half_offset)  # type: ignore[arg-type]
            _check_owner(record, producer_group, topic)
            if decision == COMMIT:
                await self._deliver(record)
            await append_records(self.broker, OP_TOPIC, 0,  # type: ignore[arg-type]
                                 [Record(0, int(time.time() * 1000), b"d" if decision == COMMIT
                                         else b"r", str(half_offset).encode(), [])])
            self._resolved.add(half_offset)
            self._checks.pop(half_offset, None)

    async def _deliver(self, record: Record) -> None:
        body, props, meta = from_record(record)
        topic = props.pop(PROPERTY_REAL_TOPIC, "")
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        meta.sys_flag = (meta.sys_flag & ~SYS_FLAG_TRANSACTION_MASK) | SYS_FLAG_TRANSACTION_COMMIT
        meta.store_timestamp = int(time.time() * 1000)
        level = int(props.get(PROPERTY_DELAY, "0") or 0)
        delays = getattr(self.broker, "delays", None)
        try:
            if level > 0 and delays is not None:
                await delays.schedule(topic, queue_id, body, props, meta, record.timestamp, level)
            else:
                await append_records(self.broker, topic, queue_id,  # type: ignore[arg-type]
                                     [to_record(body, props, meta, record.timestamp)])
        except (TopicNotExistError, MessageIllegalError):
            log.warning("committed transaction for a missing queue %s-%d", topic, queue_id)

    async def run(self) -> None:
        while True:
            await trio.sleep(self.scan_interval_s)
            try:
                await self.scan()
            except (RocketMQError, KafkaProtocolError):
                log_failure(log, "transaction check scan failed")

    async def scan(self) -> None:
        broker = self.broker
        offsets = broker.offsets  # type: ignore[attr-defined]
        plog = await get_queue(broker, HALF_TOPIC, 0)  # type: ignore[arg-type]
        start = offsets.query(SCAN_GROUP, HALF_TOPIC, 0)
        if start is None or start < plog.log_start_offset:
            start = plog.log_start_offset
        offset = start
        done_upto = start
        all_done = True
        now = time.time()
        while offset < plog.high_watermark:
            records = records_of(await plog.read(offset, 1 << 20), offset)
            if not records:
                break
            for record in records:
                offset = record.offset + 1
                if record.offset in self._resolved:
                    if all_done:
                        done_upto = offset
                    continue
                all_done = False
                _, props, meta = from_record(record)
                if now - meta.store_timestamp / 1000 < self.check_timeout_s:
                    offset = plog.high_watermark  # younger ones follow: stop here
                    break
                count, next_check = self._checks.get(record.offset, (0, 0.0))
                if now < next_check:
                    continue
                if count >= self.max_checks:
                    log.info("transaction unresolved after %d checks: rolled back", count)
                    await self.end(commit_log_offset(HALF_TOPIC, 0, record.offset), ROLLBACK)
                    continue
                self._checks[record.offset] = (count + 1, now + self.check_interval_s)
                self._check_back(record, props)
        if done_upto > start:
            await offsets.commit(SCAN_GROUP, HALF_TOPIC, 0, done_upto)

    def _check_back(self, record: Record, props: dict[str, str]) -> None:
        broker = self.broker
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        connections = broker.clients.producer_connections(group)  # type: ignore[attr-defined]
        if not connections:
            return
        cfg = broker.config  # type: ignore[attr-defined]
        clo = commit_log_offset(HALF_TOPIC, 0, record.offset)
        message = stored_message(broker, to_storage(HALF_TOPIC), 0, record)  # type: ignore[arg-type]
        message.topic = props.get(PROPERTY_REAL_TOPIC, HALF_TOPIC)
        message.queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        uniq = props.get(PROPERTY_UNIQ_KEY, "")
        request = make_request(RequestCode.CHECK_TRANSACTION_STATE, {
            "tranStateTableOffset": record.offset,
            "commitLogOffset": clo,
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": offset_message_id(cfg.advertised_host, cfg.advertised_port, clo),
        }, encode_stored_message(message), oneway=True)
        connections[-1].send_request(request)


def _check_owner(record: Record, producer_group: str | None, topic: str | None) -> None:
    """Refuse a decision on a half message the deciding producer does not own."""
    _, props, _ = from_record(record)
    if producer_group is not None and props.get(PROPERTY_PRODUCER_GROUP, "") != producer_group:
        raise NoPermissionError(f"the half message belongs to another producer group than "
                                f"{producer_group!r}")
    if topic is not None and props.get(PROPERTY_REAL_TOPIC, "") != topic:
        raise NoPermissionError(f"the half message is not one of topic {topic!r}")
