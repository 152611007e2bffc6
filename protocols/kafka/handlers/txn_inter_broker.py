"""Inter-broker transaction requests of a cluster: WriteTxnMarkers (27), and TxnOffsetCommit
(28) with producer id -1, "apply these committed offsets".

In a cluster the coordinator of a transactional id, the owners of the transaction's partitions
and the coordinator of its consumer group are often different brokers.

- WriteTxnMarkers (Kafka's inter-broker marker request): the transaction coordinator asks a
  partition's owner to append COMMIT/ABORT control batches.  A marker may only be appended by
  the owner (another broker opening the log would fence it), so each partition goes through
  `topic_lookup.open_partition` (NOT_LEADER_OR_FOLLOWER for a non-owner) and the log it
  returns checks ownership again after the append: a broker that lost the partition while
  writing never reports the marker written.  The partitions of a request are written in
  parallel, each answered with its own code.
- TxnOffsetCommit with producer id -1 (a form no client sends: a transactional client always
  has a producer id): the coordinator of a transaction that ended tells the group's
  coordinator, which applies the offsets sent (those of a commit; none for an abort) with
  `apply_transactional_offsets` and forgets the transaction's unstable partitions
  (`transaction_offsets_settled`).  Any other TxnOffsetCommit goes to the ordinary handler
  (transactions.py).

Both are served only by cluster brokers (the broker has an ownership service) and only to
principals with CLUSTER_ACTION on the cluster.  This module must never keep transaction state:
the coordinator decides what is written.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from protocols.kafka.acl_model import CLUSTER_NAME, OP_CLUSTER_ACTION, RES_CLUSTER
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ClusterAuthorizationFailedError, ErrorCode, KafkaProtocolError
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.handlers.topic_lookup import open_partition
from protocols.kafka.handlers.transactions import handle_txn_offset_commit

WRITE_TXN_MARKERS = 27
APPLY_OFFSETS_PRODUCER_ID = -1


def _inter_broker_allowed(ctx: RequestContext) -> bool:
    return (ownership_of(ctx.broker) is not None
            and ctx.authorize(OP_CLUSTER_ACTION, RES_CLUSTER, CLUSTER_NAME))


async def _write_one(ctx: RequestContext, marker: dict, topic: str, partition: int) -> int:
    try:
        plog = await open_partition(ctx, topic, partition)
        await plog.write_txn_marker(int(marker["producer_id"]), int(marker["producer_epoch"]),
                                    bool(marker["transaction_result"]),
                                    int(marker["coordinator_epoch"]))
        return 0  # open_partition's log checked this broker still owns the partition
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        return int(error_code_of(exc))


async def handle_write_txn_markers(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    allowed = _inter_broker_allowed(ctx)
    codes: dict[tuple[int, str, int], int] = {}

    async def one(index: int, marker: dict, topic: str, partition: int) -> None:
        codes[(index, topic, partition)] = await _write_one(ctx, marker, topic, partition)

    markers = body.get("markers") or []
    async with trio.open_nursery() as nursery:
        for index, marker in enumerate(markers):
            for t in marker.get("topics") or []:
                for p in t.get("partition_indexes") or []:
                    if allowed:
                        nursery.start_soon(one, index, marker, t["name"], int(p))
                    else:
                        codes[(index, t["name"], int(p))] = int(
                            ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    answers: list[dict[str, Any]] = []
    for index, marker in enumerate(markers):
        topics = [
            {"name": t["name"],
             "partitions": [{"partition_index": int(p),
                             "error_code": codes[(index, t["name"], int(p))]}
                            for p in t.get("partition_indexes") or []]}
            for t in marker.get("topics") or []
        ]
        answers.append({"producer_id": int(marker["producer_id"]), "topics": topics})
    return {"markers": answers}


async def handle_txn_offset_commit_or_apply(ctx: RequestContext, header: RequestHeader,
                                            body: dict) -> dict:
    """TxnOffsetCommit; with producer id -1, a committed transaction's offsets to apply."""
    if int(body.get("producer_id", 0)) != APPLY_OFFSETS_PRODUCER_ID:
        return await handle_txn_offset_commit(ctx, header, body)
    now = int(time.time() * 1000)
    offsets: dict[OffsetKey, CommittedOffset] = {}
    for t in body.get("topics") or []:
        for p in t.get("partitions") or []:
            offsets[(t["name"], int(p["partition_index"]))] = CommittedOffset(
                int(p["committed_offset"]), int(p.get("committed_leader_epoch", -1)),
                p.get("committed_metadata"), now,
            )
    try:
        if not _inter_broker_allowed(ctx):
            raise ClusterAuthorizationFailedError("offsets are applied by cluster brokers only")
        groups = ctx.broker.group_coordinator
        if groups is None:
            raise KafkaProtocolError("no group coordinator",
                                     code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if offsets:
            await groups.apply_transactional_offsets(body["group_id"], offsets)
        settled = getattr(ctx.broker.transaction_coordinator, "transaction_offsets_settled", None)
        if settled is not None and body.get("transactional_id"):
            settled(body["group_id"], body["transactional_id"])
        code = 0
    except Exception as exc:  # noqa: BLE001 - every partition gets the error
        code = int(error_code_of(exc))
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in offsets:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
