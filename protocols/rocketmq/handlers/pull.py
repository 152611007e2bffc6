"""PULL_MESSAGE (11): read a queue from an offset, filter by tag, long-poll when empty.

The subscription comes from the request when the client sends it (sysFlag bit 2: C++ client,
ali-ons) and otherwise from the group's heartbeat (Java).  Records are decoded from the stored
batches and re-framed in RocketMQ's stored-message encoding (what RocketMQ clients wrote in one
pass per batch: pulled_messages.py).  When nothing is there and the
client allows suspension (sysFlag bit 1), the request waits for new data up to its suspend
timeout (capped by long_polling_max_s).  Offsets outside [min, max] answer PULL_OFFSET_MOVED;
an empty queue PULL_NOT_FOUND; records that were all filtered out PULL_RETRY_IMMEDIATELY with
the next offset past them.  With sysFlag bit 0 the request also commits `commitOffset` (in
the background where the broker's offsets have a writer for that: no answer waits for it).
The group's subscription-group config (handlers/subscription_groups.py, from memory) may refuse
the pull with NO_PERMISSION first, as Java's does (consumeEnable, consumeBroadcastEnable).

This module must never change a partition.
"""

from __future__ import annotations

import trio

from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import Record
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.handlers.common import (
    StorageError,
    get_queue,
    scan_queue,
    stored_message,
)
from protocols.rocketmq.handlers.subscription_groups import effective_config
from protocols.rocketmq.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullHeader,
)
from protocols.rocketmq.message_encoding import PROPERTY_TAGS, encode_stored_message, ipv4
from protocols.rocketmq.pulled_messages import PullEncoding
from protocols.rocketmq.subscription import MATCH_ALL, TagFilter, parse_tag_expression
from protocols.rocketmq.topic_names import from_storage, to_storage

MAX_MESSAGES = 1024
READ_CHUNK_BYTES = 256 * 1024  # per partition read: batches are decoded only as needed
# A read asks for about what the pull still wants (a push consumer asks for 32 messages; the
# cache would otherwise hand over ~256 KiB of batches per pull, walked and mostly dropped);
# larger messages or a tag filter just take another read.
READ_BYTES_PER_MESSAGE = 2048
MIN_READ_CHUNK_BYTES = 16 * 1024


def _filter_for(broker: BrokerLike, header: PullHeader) -> TagFilter:
    if header.sys_flag & PULL_FLAG_SUBSCRIPTION and header.subscription is not None:
        return parse_tag_expression(header.subscription, header.expression_type)
    found = broker.clients.subscription(header.consumer_group, header.topic)
    if found is None:
        if header.subscription is not None:
            return parse_tag_expression(header.subscription, header.expression_type)
        return MATCH_ALL
    return found


def _refusal(broker: BrokerLike, request: RemotingCommand,
             header: PullHeader) -> RemotingCommand | None:
    """NO_PERMISSION as Java's PullMessageProcessor answers it: the group's consumeEnable is
    off, or consumeBroadcastEnable is off for a broadcasting group (Java checks the latter only
    when the subscription comes from the heartbeat, i.e. without sysFlag bit 2)."""
    group = header.consumer_group
    config = effective_config(broker, group)
    if not config["consumeEnable"]:
        return make_response(request, ResponseCode.NO_PERMISSION,
                             f"subscription group no permission, {group}")
    if not config["consumeBroadcastEnable"] and not header.sys_flag & PULL_FLAG_SUBSCRIPTION:
        members = broker.clients.consumer_groups.get(group, {})
        if any(m.message_model == "BROADCASTING" for m in members.values()):
            return make_response(request, ResponseCode.NO_PERMISSION,
                                 f"the consumer group[{group}] can not consume by broadcast "
                                 "way")
    return None


async def handle_pull(broker: BrokerLike, conn: ConnectionLike,
                      request: RemotingCommand) -> RemotingCommand:
    header = PullHeader.parse(request.ext_fields)
    refused = _refusal(broker, request, header)
    if refused is not None:
        return refused
    tag_filter = _filter_for(broker, header)
    plog = await get_queue(broker, header.topic, header.queue_id)
    if header.sys_flag & PULL_FLAG_COMMIT_OFFSET and header.commit_offset >= 0:
        # Nothing answers this commit: where the broker has a writer for it, the pull does not
        # wait for it to be durable (gateway/rocketmq/service.py RocketMQOffsets.commit_soon).
        soon = getattr(broker.offsets, "commit_soon", None)
        if soon is None or not soon(header.consumer_group, header.topic, header.queue_id,
                                    header.commit_offset):
            await broker.offsets.commit(header.consumer_group, header.topic, header.queue_id,
                                        header.commit_offset)
    max_msgs = max(1, min(header.max_msg_nums, MAX_MESSAGES))
    offset = header.queue_offset
    deadline = trio.current_time()
    if header.sys_flag & PULL_FLAG_SUSPEND and header.suspend_timeout_ms > 0:
        deadline += min(header.suspend_timeout_ms / 1000.0, broker.config.long_polling_max_s)
    storage_topic = to_storage(header.topic)

    def convert(record: Record) -> tuple[bytes, int] | None:
        tags = next((v for k, v in record.headers if k == PROPERTY_TAGS), None)
        if not tag_filter.matches(tags.decode("utf-8", "replace") if tags is not None else None):
            return None
        encoded = encode_stored_message(
            stored_message(broker, storage_topic, header.queue_id, record))
        return encoded, len(encoded)

    cfg = broker.config
    fast = PullEncoding(from_storage(storage_topic), header.queue_id, ipv4(cfg.advertised_host),
                        cfg.advertised_port, tag_filter.matcher)

    def read_bytes(kept: int, kept_bytes: int) -> int:
        wanted = max(MIN_READ_CHUNK_BYTES, (max_msgs - kept) * READ_BYTES_PER_MESSAGE)
        return min(READ_CHUNK_BYTES, wanted, broker.config.pull_max_bytes - kept_bytes)

    while True:
        low, high = plog.log_start_offset, plog.high_watermark
        if offset < low or offset > high:
            next_offset = low if offset < low else high
            return _answer(request, ResponseCode.PULL_OFFSET_MOVED, next_offset, low, high)
        try:
            bodies, offset = await scan_queue(
                plog, offset, convert, max_messages=max_msgs,
                max_records=broker.config.pull_scan_limit,
                max_bytes=broker.config.pull_max_bytes, read_bytes=read_bytes,
                encode_batch=fast.encode_batch,
            )  # fmt: skip
        except KafkaProtocolError as exc:
            raise StorageError(f"reading {header.topic}-{header.queue_id}: {exc}") from exc
        low, high = plog.log_start_offset, plog.high_watermark
        if bodies:
            return _answer(request, ResponseCode.SUCCESS, offset, low, high, b"".join(bodies))
        if offset > header.queue_offset:
            return _answer(request, ResponseCode.PULL_RETRY_IMMEDIATELY, offset, low, high)
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            return _answer(request, ResponseCode.PULL_NOT_FOUND, offset, low, high)
        await plog.wait_for_data(offset, remaining)
        if plog.high_watermark <= offset:
            low, high = plog.log_start_offset, plog.high_watermark
            return _answer(request, ResponseCode.PULL_NOT_FOUND, offset, low, high)


def _answer(request: RemotingCommand, code: ResponseCode, next_offset: int, low: int, high: int,
            body: bytes = b"") -> RemotingCommand:
    remark = {
        ResponseCode.PULL_OFFSET_MOVED: "the request offset is out of range",
        ResponseCode.PULL_NOT_FOUND: "no new message",
        ResponseCode.PULL_RETRY_IMMEDIATELY: "no matched message",
    }.get(code)
    return make_response(request, code, remark, {
        "suggestWhichBrokerId": 0,
        "nextBeginOffset": next_offset,
        "minOffset": low,
        "maxOffset": high,
    }, body)
