"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit
(28), and InitProducerId (22) with a transactional id (producer_ids.py delegates here).

Each handler turns its request into one call on the broker's TransactionCoordinator and answers
with the error code the coordinator raised (per partition where the response has no top-level
code).  PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH to request versions
older than the one that introduced it, as Kafka does, since older clients do not know the code.
AddPartitionsToTxn v4+ carries several transactions (the batched form); each is answered on its
own.  TxnOffsetCommit v3+ checks the member and generation against the group coordinator when
the client sends them (KIP-447).  Authorisation as Kafka's: WRITE on the transactional id for
all of them, WRITE on each topic added, READ on the group and on each committed topic;
AddPartitionsToTxn v4+ (the batched form brokers send) needs CLUSTER_ACTION.

This module must never keep transaction state or write to a partition: the coordinator does.
"""

from __future__ import annotations

import time
from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_CLUSTER_ACTION,
    OP_READ,
    OP_WRITE,
    RES_CLUSTER,
    RES_TOPIC,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.handlers.authorization import require_group, require_transactional_id
from protocols.kafka.handlers.error_responses import error_code_of

INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

# The first version of each API that knows PRODUCER_FENCED (KIP-588).
_PRODUCER_FENCED_SINCE = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2,
                          END_TXN: 2, TXN_OFFSET_COMMIT: 3}


def _code(exc: BaseException, api_key: int, version: int) -> int:
    code = error_code_of(exc)
    if code == ErrorCode.PRODUCER_FENCED and version < _PRODUCER_FENCED_SINCE[api_key]:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)


def _coordinator(ctx: RequestContext) -> Any:
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        raise KafkaProtocolError("no transaction coordinator",
                                 code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return coordinator


async def init_transactional_producer(ctx: RequestContext, header: RequestHeader,
                                      body: dict) -> dict:
    """InitProducerId for a transactional id (fences earlier epochs of that id)."""
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1,
                              "producer_epoch": -1}
    try:
        require_transactional_id(ctx, OP_WRITE, body["transactional_id"])
        pid, epoch = await _coordinator(ctx).init_producer_id(
            body["transactional_id"], int(body.get("transaction_timeout_ms", 60000)),
            int(body.get("producer_id", -1)), int(body.get("producer_epoch", -1)),
        )
        answer["producer_id"], answer["producer_epoch"] = pid, epoch
    except Exception as exc:  # noqa: BLE001 - becomes the response's error code
        answer["error_code"] = _code(exc, INIT_PRODUCER_ID, header.api_version)
    return answer


async def _add_partitions_one(ctx: RequestContext, version: int, txn_id: str, pid: int,
                              epoch: int, topics: list[dict], verify_only: bool) -> list[dict]:
    wanted: list[OffsetKey] = [(t["name"], int(p)) for t in topics for p in t.get("partitions")
                               or []]
    refused = {key for key in wanted if not ctx.authorize(OP_WRITE, RES_TOPIC, key[0])}
    try:
        require_transactional_id(ctx, OP_WRITE, txn_id)
        if refused:  # Kafka adds none of them: the others are "not attempted"
            codes = {key: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) if key in refused
                     else int(ErrorCode.OPERATION_NOT_ATTEMPTED) for key in wanted}
        else:
            codes = await _coordinator(ctx).add_partitions(txn_id, pid, epoch, wanted,
                                                           verify_only)
    except Exception as exc:  # noqa: BLE001 - every partition gets the error
        code = _code(exc, ADD_PARTITIONS_TO_TXN, version)
        codes = dict.fromkeys(wanted, code)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition) in wanted:
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": codes[(topic, partition)]}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


async def handle_add_partitions_to_txn(ctx: RequestContext, header: RequestHeader,
                                       body: dict) -> dict:
    version = header.api_version
    if version <= 3:
        results = await _add_partitions_one(
            ctx, version, body["v3_and_below_transactional_id"],
            int(body["v3_and_below_producer_id"]), int(body["v3_and_below_producer_epoch"]),
            body.get("v3_and_below_topics") or [], False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
    by_txn = []
    if not ctx.authorize(OP_CLUSTER_ACTION, RES_CLUSTER, CLUSTER_NAME):
        # v4+ (the batched, verify-only form) is sent by brokers only, as Kafka's KafkaApis.
        return {"throttle_time_ms": 0, "results_by_transaction": [],
                "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}
    for txn in body.get("transactions") or []:
        results = await _add_partitions_one(
            ctx, version, txn["transactional_id"], int(txn["producer_id"]),
            int(txn["producer_epoch"]), txn.get("topics") or [], bool(txn.get("verify_only")),
        )
        by_txn.append({"transactional_id": txn["transactional_id"], "topic_results": results})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": by_txn}


async def handle_add_offsets_to_txn(ctx: RequestContext, header: RequestHeader,
                                    body: dict) -> dict:
    try:
        require_transactional_id(ctx, OP_WRITE, body["transactional_id"])
        require_group(ctx, OP_READ, body["group_id"])
        await _coordinator(ctx).add_offsets(body["transactional_id"], int(body["producer_id"]),
                                            int(body["producer_epoch"]), body["group_id"])
        code = 0
    except Exception as exc:  # noqa: BLE001 - becomes the response's error code
        code = _code(exc, ADD_OFFSETS_TO_TXN, header.api_version)
    return {"throttle_time_ms": 0, "error_code": code}


async def handle_end_txn(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    try:
        require_transactional_id(ctx, OP_WRITE, body["transactional_id"])
        await _coordinator(ctx).end_transaction(
            body["transactional_id"], int(body["producer_id"]), int(body["producer_epoch"]),
            bool(body["committed"]),
        )
        code = 0
    except Exception as exc:  # noqa: BLE001 - becomes the response's error code
        code = _code(exc, END_TXN, header.api_version)
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _check_member(ctx: RequestContext, body: dict) -> None:
    """KIP-447: a TxnOffsetCommit naming a member and generation must match the group."""
    member_id = body.get("member_id") or ""
    generation = int(body.get("generation_id", -1))
    groups = ctx.broker.group_coordinator
    if groups is None:
        raise KafkaProtocolError("no group coordinator", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not member_id and generation < 0:
        return
    group = groups.describe(body["group_id"])
    members = getattr(group, "members", None)
    if not members:
        if generation >= 0:
            raise KafkaProtocolError("group has no members", code=ErrorCode.ILLEGAL_GENERATION)
        return
    if member_id not in members:
        raise KafkaProtocolError(f"unknown member {member_id!r}",
                                 code=ErrorCode.UNKNOWN_MEMBER_ID)
    if generation != group.generation_id:
        raise KafkaProtocolError(f"generation {generation} is not {group.generation_id}",
                                 code=ErrorCode.ILLEGAL_GENERATION)


async def handle_txn_offset_commit(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    now = int(time.time() * 1000)
    offsets: dict[OffsetKey, CommittedOffset] = {}
    refused: set[OffsetKey] = set()
    for t in body.get("topics") or []:
        allowed = ctx.authorize(OP_READ, RES_TOPIC, t["name"])
        for p in t.get("partitions") or []:
            key = (t["name"], int(p["partition_index"]))
            if not allowed:
                refused.add(key)
                continue
            offsets[key] = CommittedOffset(
                int(p["committed_offset"]), int(p.get("committed_leader_epoch", -1)),
                p.get("committed_metadata"), now,
            )
    refused_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    try:
        require_transactional_id(ctx, OP_WRITE, body["transactional_id"])
        require_group(ctx, OP_READ, body["group_id"])
    except Exception as exc:  # noqa: BLE001 - every partition gets the error
        code = refused_code = _code(exc, TXN_OFFSET_COMMIT, header.api_version)
    else:
        try:
            if offsets:
                _check_member(ctx, body)
                await _coordinator(ctx).txn_offset_commit(
                    body["transactional_id"], int(body["producer_id"]),
                    int(body["producer_epoch"]), body["group_id"], offsets,
                )
            code = 0
        except Exception as exc:  # noqa: BLE001 - every authorised partition gets the error
            code = _code(exc, TXN_OFFSET_COMMIT, header.api_version)
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in offsets:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    for topic, partition in sorted(refused):
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": refused_code})
    return {"throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
