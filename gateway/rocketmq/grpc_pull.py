"""RocketMQ 5 PullMessage: read one queue from an offset the client keeps (pull consumers).

Unlike ReceiveMessage there is no delivery engine here: the client names the queue and the
offset, gets the messages that match its tag or SQL92 filter with the next offset to ask for,
and keeps its progress itself (UpdateOffset / GetOffset store it as the group's committed
offset, the one 4.x consumers and tools see).  Nothing becomes invisible and nothing is
counted as a delivery attempt.  An empty queue is long-polled up to the request's timeout;
an offset outside the queue is answered ILLEGAL_OFFSET with the nearest valid offset.

This module must never change a partition or an offset.
"""

from __future__ import annotations

import trio

from protocols.kafka.record_batch import Record
from protocols.rocketmq.broker_api import BrokerLike, PartitionLogLike
from protocols.rocketmq.grpc.backend import PullRequest, PullResult
from protocols.rocketmq.grpc.messages import Delivered
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.handlers.common import get_queue, scan_queue
from protocols.rocketmq.message_encoding import from_record
from protocols.rocketmq.message_id import commit_log_offset, offset_message_id

READ_BYTES = 256 * 1024
MAX_SCAN = 4096  # records looked at per pull (a filter skipping most of them answers sooner)
MAX_BYTES = 4 * 1024 * 1024


async def pull(broker: BrokerLike, req: PullRequest) -> PullResult:
    plog = await get_queue(broker, req.topic, req.queue_id)
    deadline = trio.current_time() + req.long_poll_ms / 1000
    offset = req.offset
    while True:
        low, high = plog.log_start_offset, plog.high_watermark
        if not low <= offset <= high:
            return PullResult(pb.ILLEGAL_OFFSET, [], low if offset < low else high)
        out, offset = await _scan(broker, plog, req, offset)
        if out:
            return PullResult(pb.OK, out, offset)
        if offset > req.offset:  # everything looked at was filtered out: ask from there
            return PullResult(pb.MESSAGE_NOT_FOUND, [], offset)
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            return PullResult(pb.MESSAGE_NOT_FOUND, [], offset)
        await plog.wait_for_data(offset, remaining)
        if plog.high_watermark <= offset:
            return PullResult(pb.MESSAGE_NOT_FOUND, [], offset)


async def _scan(broker: BrokerLike, plog: PartitionLogLike, req: PullRequest,
                offset: int) -> tuple[list[Delivered], int]:
    """Matching messages from `offset` on (at most a batch, MAX_SCAN records, MAX_BYTES),
    and the offset after the last record looked at."""
    cfg = broker.config

    def convert(record: Record) -> tuple[Delivered, int] | None:
        body, props, meta = from_record(record)
        if not req.wanted(props):
            return None
        fallback = offset_message_id(cfg.advertised_host, cfg.advertised_port,
                                     commit_log_offset(req.topic, req.queue_id, record.offset))
        return Delivered(req.topic, req.queue_id, record.offset, body, props, meta,
                         record.timestamp, 1, "", 0, fallback), len(body)

    return await scan_queue(plog, offset, convert, max_messages=req.batch_size,
                            max_records=MAX_SCAN, max_bytes=MAX_BYTES,
                            read_bytes=lambda _kept, _size: READ_BYTES)
