"""Produce (key 0): append each partition's record batches and report their offsets.

Every append is acknowledged by the ledger's ack quorum before it returns, so acks=1 and
acks=-1 are answered the same way, after durability; acks=0 is appended the same way too and
the listener simply sends no response.  Partitions of one request are appended concurrently
(a request with a single partition appends inline, without a task); each gets its own error
code.  Old clients' magic v0/v1 message sets are converted to ONE v2
batch per partition before they are stored (one offset space, one stored form, one atomic
append: a failed append leaves nothing of the request behind).  Topics whose
`message.timestamp.type` is LogAppendTime get the broker's clock in the batch and in the answer.

Each partition needs WRITE on its topic (TOPIC_AUTHORIZATION_FAILED otherwise); a
transactional produce needs WRITE on its transactional id (every partition gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise).

This module must never decode individual records or re-encode v2 batches: the batch bytes go to
the partition log as they came.

Compressed batches are not decompressed here (decided in session 12, with figures): the
header, its counts and the CRC-32C are checked (record_batch.validate_batch), the payload is
not. Kafka's LogValidator decompresses each compressed batch and walks its records, so a
producer that compresses garbage under a valid CRC gets CORRUPT_MESSAGE there, while here the
batch is stored and its consumers get a decompression error for it (log compaction warns on
every pass). A CRC computed over garbage takes a broken client, never the network, and it hurts
only that topic's readers, whom any client allowed to WRITE can feed junk values anyway. The
price of checking, from benchmarks/bench_produce_validation.py (one window, load 2.0 -> 1.4;
~128 KiB client batches of text-like values; broker CPU per message of a confluent-kafka
produce with the same compression.type, fsync on, measured in the same run):

                     decompress    decompress + record walk    broker's whole    check /
    values  codec    (us/MB)       (us/MB)     (us/msg)       produce (us/msg)  produce
    100 B   lz4        557          14,727       1.72            0.50           345% (alone 13%)
            snappy     728          14,898       1.74            0.40           436% (21%)
            zstd     1,244          15,414       1.80            0.80           225% (18%)
            gzip     2,951          17,121       2.00            0.70           286% (49%)
    1 KB    lz4        603           2,268       2.30            3.85            60% (16%)
            snappy     524           2,189       2.22            3.50            64% (15%)
            zstd       969           2,634       2.67            5.50            49% (18%)
            gzip     3,120           4,785       4.86            6.80            71% (47%)

(us/MB of uncompressed records; "alone": decompression without the walk.) A compressed
produce is cheap for the broker because it never touches the records: checking them as Kafka
does would cost 0.5-4.4x the whole produce, and decompressing alone 13-49%, on the Trio thread
(or a thread hop per batch). Not worth it for a fault only a broken client causes; revisit
with a compiled record walk (as spark_bridge/bulk_records.c does for reads) if a topic ever
needs Kafka's strictness, and then as a topic config.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from protocols.kafka.acl_model import OP_WRITE, RES_TOPIC, RES_TRANSACTIONAL_ID
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    CorruptMessageError,
    ErrorCode,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaProtocolError,
    MessageTooLargeError,
    TopicAuthorizationFailedError,
)
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of
from protocols.kafka.handlers.metadata import is_internal
from protocols.kafka.handlers.topic_lookup import open_partition, topic_info
from protocols.kafka.legacy_message_set import convert_legacy_to_batch

log = logging.getLogger("ledgerwire.kafka.produce")

MAGIC_OFFSET = 16  # same position in v0/v1 message sets and v2 record batches
LOG_APPEND_TIME = "LogAppendTime"
# Below this, decompressing and recompressing a legacy set costs less than a thread hop.
LEGACY_CONVERT_IN_THREAD_BYTES = 64 << 10


def _partition_error(index: int, code: int, message: str | None,
                     record_errors: tuple[tuple[int, str], ...] = ()) -> dict:
    return {
        "index": index,
        "error_code": int(code),
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                          for i, m in record_errors],
        "error_message": message,
    }


async def _convert_legacy(records: bytes | memoryview) -> bytes:
    """The magic v0/v1 set as one v2 batch; big sets are (re)compressed off the Trio thread."""
    if len(records) < LEGACY_CONVERT_IN_THREAD_BYTES:
        return convert_legacy_to_batch(records)
    return await trio.to_thread.run_sync(convert_legacy_to_batch, bytes(records))


async def _admit_under_backlog_quota(ctx: RequestContext, topic: str, index: int) -> None:
    """Hold or refuse a produce to a partition over its backlog quota
    (gateway/topics/backlog_quota.py
    says why these codes: 44 is not retriable, 89 is in the Java client)."""
    quotas = getattr(ctx.topics, "backlog_quotas", None)
    if quotas is None:
        return
    refusal = await quotas.admit(topic, index)
    if refusal is not None:
        raise KafkaProtocolError(refusal.message, code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
                                 if refusal.held else ErrorCode.POLICY_VIOLATION)


async def _append_partition(
    ctx: RequestContext, topic: str, partition: dict[str, Any], out: dict
) -> None:
    index = int(partition.get("index", 0))
    turn = ctx.turn
    issued = False
    try:
        if not ctx.authorize(OP_WRITE, RES_TOPIC, topic):
            raise TopicAuthorizationFailedError(f"not authorized to write to topic {topic}")
        if is_internal(ctx, topic):  # Kafka's rule: the broker alone appends to its own topics
            raise InvalidTopicError(f"cannot append to internal topic {topic}")
        records = partition.get("records")
        if records is None or len(records) == 0:
            raise CorruptMessageError("produce request without records")
        info = topic_info(ctx, topic)
        configs = info.configs if info is not None else {}
        limit = int(configs.get("max.message.bytes", ctx.broker.config.max_message_bytes))
        if len(records) > limit:
            raise MessageTooLargeError(
                f"{len(records)} bytes of records exceed max.message.bytes={limit}"
            )
        log_append = configs.get("message.timestamp.type") == LOG_APPEND_TIME
        plog = await open_partition(ctx, topic, index, log_only=True)
        await _admit_under_backlog_quota(ctx, topic, index)
        batch: bytes | memoryview = records
        if len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] < 2:
            batch = await _convert_legacy(records)
        if turn is not None:
            await turn.wait_for_append_turn()
            turn.append_issued()
        issued = True
        # No checkpoint between the turn and this call: append takes its offset synchronously.
        # One batch, one ledger entry: a legacy set is stored whole or not at all.
        result = await plog.append(batch, timestamp_type_log_append=log_append)
        out[index] = {
            "index": index,
            "error_code": 0,
            "base_offset": result.base_offset,
            "log_append_time_ms": result.log_append_time_ms,
            "log_start_offset": result.log_start_offset,
            "record_errors": [],
            "error_message": None,
        }
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        code = error_code_of(exc, unavailable=ErrorCode.NOT_ENOUGH_REPLICAS)
        out[index] = _partition_error(index, code, error_message_of(exc),
                                      getattr(exc, "record_errors", ()))
    finally:
        if not issued and turn is not None:
            turn.append_issued()


async def handle_produce(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    acks = body.get("acks", 1)
    topics = body.get("topic_data") or []
    responses: list[dict] = []
    refusal: KafkaProtocolError | None = None
    if acks not in (0, 1, -1):
        refusal = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
    elif body.get("transactional_id") and not ctx.authorize(
            OP_WRITE, RES_TRANSACTIONAL_ID, body["transactional_id"]):
        refusal = KafkaProtocolError("not authorized to use this transactional id",
                                     code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if ctx.turn is not None:
        ctx.turn.expect_appends(
            0 if refusal else sum(len(t.get("partition_data") or []) for t in topics)
        )
    if refusal is not None:
        for t in topics:
            responses.append({
                "name": t.get("name"),
                "partition_responses": [
                    _partition_error(int(p.get("index", 0)), refusal.code, refusal.message)
                    for p in t.get("partition_data") or []
                ],
            })
        return {"responses": responses, "throttle_time_ms": 0}

    if len(topics) == 1 and len(topics[0].get("partition_data") or []) == 1:
        # One partition (the common case): append inline, without a nursery and a task.
        name = topics[0].get("name")
        partition = topics[0]["partition_data"][0]
        index = int(partition.get("index", 0))
        single: dict[int, dict] = {}
        await _append_partition(ctx, name, partition, single)
        return {
            "responses": [{
                "name": name,
                "partition_responses": [
                    single.get(index) or _partition_error(index, ErrorCode.UNKNOWN_SERVER_ERROR,
                                                          None)
                ],
            }],
            "throttle_time_ms": 0,
        }

    results: list[tuple[str, list[int], dict]] = []
    async with trio.open_nursery() as nursery:
        for t in topics:
            name = t.get("name")
            out: dict[int, dict] = {}
            order: list[int] = []
            for p in t.get("partition_data") or []:
                order.append(int(p.get("index", 0)))
                nursery.start_soon(_append_partition, ctx, name, p, out)
            results.append((name, order, out))
    for name, order, out in results:
        responses.append({
            "name": name,
            "partition_responses": [
                out.get(i) or _partition_error(i, ErrorCode.UNKNOWN_SERVER_ERROR, None)
                for i in order
            ],
        })
    return {"responses": responses, "throttle_time_ms": 0}


def produce_failed(response: dict) -> bool:
    """True if any partition of a Produce response carries an error (acks=0 closes then)."""
    return any(
        p.get("error_code")
        for t in response.get("responses", [])
        for p in t.get("partition_responses", [])
    )
