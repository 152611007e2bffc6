"""DeleteRecords (21), DescribeCluster (60) and DescribeProducers (61).

DeleteRecords moves a partition's log start offset (PartitionLog.delete_records_before: the
new start is persisted first, then every whole ledger below it is deleted) and answers the new
low watermark; offset -1 means "up to the high watermark".  DescribeCluster lists this broker
(the only one a client needs: it leads every partition) and, when asked, the cluster
operations the caller is allowed.  DescribeProducers reports a partition's idempotent and
transactional producers from its producer state.

Authorisation: DELETE on the topic for DeleteRecords, READ on the topic for DescribeProducers,
DESCRIBE on the cluster for DescribeCluster.

This module must never write partition data other than through the partition log's own trim.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_DELETE,
    OP_DESCRIBE,
    OP_READ,
    RES_CLUSTER,
    RES_TOPIC,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    ErrorCode,
    KafkaProtocolError,
    TopicAuthorizationFailedError,
)
from protocols.kafka.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    cluster_authorized_operations,
)
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of
from protocols.kafka.handlers.topic_lookup import open_partition

ENDPOINT_BROKERS = 1


async def _delete_partition(ctx: RequestContext, topic: str, p: dict[str, Any]) -> dict:
    index = int(p.get("partition_index", 0))
    try:
        if not ctx.authorize(OP_DELETE, RES_TOPIC, topic):
            raise TopicAuthorizationFailedError(f"not authorized to delete records of {topic}")
        plog = await open_partition(ctx, topic, index)
        low = await plog.delete_records_before(int(p.get("offset", -1)))
        return {"partition_index": index, "low_watermark": low, "error_code": 0}
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        return {"partition_index": index, "low_watermark": -1, "error_code": error_code_of(exc)}


async def handle_delete_records(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    topics = []
    for t in body.get("topics") or []:
        name = t.get("name") or ""
        topics.append({
            "name": name,
            "partitions": [await _delete_partition(ctx, name, p)
                           for p in t.get("partitions") or []],
        })
    return {"throttle_time_ms": 0, "topics": topics}


async def handle_describe_cluster(ctx: RequestContext, header: RequestHeader,
                                  body: dict) -> dict:
    config = ctx.broker.config
    out: dict[str, Any] = {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "endpoint_type": ENDPOINT_BROKERS, "cluster_id": config.cluster_id,
        "controller_id": config.broker_id, "brokers": [],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    endpoint_type = int(body.get("endpoint_type", ENDPOINT_BROKERS))
    if endpoint_type != ENDPOINT_BROKERS:
        out.update(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                   error_message="this endpoint serves brokers, not controllers")
        return out
    # As Kafka's KafkaApis: the brokers are no secret (Metadata shows them to anyone); the
    # authorized operations are shown only to a principal that may describe the cluster.
    out["brokers"] = [{"broker_id": config.broker_id, "host": ctx.broker.advertised_host,
                       "port": ctx.broker.advertised_port, "rack": config.rack}]
    if body.get("include_cluster_authorized_operations"):
        out["cluster_authorized_operations"] = (
            cluster_authorized_operations(ctx)
            if ctx.authorize(OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME) else 0)
    return out


def _producer_rows(plog: Any) -> list[dict]:
    state = getattr(plog, "producer_state", None)
    if state is None:
        raise KafkaProtocolError("producer state is not available for this partition")
    rows = []
    for entry in list(state.producers.values()):
        last_ts = entry.batches[-1].timestamp_ms if entry.batches else entry.last_update_ms
        rows.append({
            "producer_id": entry.producer_id,
            "producer_epoch": entry.epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": last_ts,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": entry.txn_first_offset,  # -1: no open transaction
        })
    return rows


async def _describe_partition(ctx: RequestContext, topic: str, index: int) -> dict:
    try:
        if not ctx.authorize(OP_READ, RES_TOPIC, topic):
            raise TopicAuthorizationFailedError(f"not authorized to read topic {topic}")
        plog = await open_partition(ctx, topic, index)
        return {"partition_index": index, "error_code": 0, "error_message": None,
                "active_producers": _producer_rows(plog)}
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        return {"partition_index": index, "error_code": error_code_of(exc),
                "error_message": error_message_of(exc), "active_producers": []}


async def handle_describe_producers(ctx: RequestContext, header: RequestHeader,
                                    body: dict) -> dict:
    topics = []
    for t in body.get("topics") or []:
        name = t.get("name") or ""
        topics.append({
            "name": name,
            "partitions": [await _describe_partition(ctx, name, int(i))
                           for i in t.get("partition_indexes") or []],
        })
    return {"throttle_time_ms": 0, "topics": topics}
