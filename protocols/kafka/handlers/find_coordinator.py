"""FindCoordinator (key 10): which broker coordinates a group or a transactional id.

In standalone this broker coordinates every group and transactional id, for both key types;
clients ask early (kafka-python and librdkafka look the coordinator up before they need it),
so answering keeps them from looping on COORDINATOR_NOT_AVAILABLE.  In a cluster the answer
is the owner of the key's coordinator partition (ownership service); with no live owner yet
the answer is COORDINATOR_NOT_AVAILABLE and the client asks again.

This module must never keep group or transaction state: that belongs to the coordinators.
"""

from __future__ import annotations

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_CLUSTER_ACTION,
    OP_DESCRIBE,
    RES_CLUSTER,
    RES_GROUP,
    RES_TRANSACTIONAL_ID,
)
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode

TRANSACTION_KEY = 1
SHARE_KEY = 2  # "group:topicId:partition", the share-partition state's coordinator (KIP-932)


def _refused(ctx: RequestContext, key_type: int, key: str) -> int:
    """DESCRIBE on the group (key type 0) or the transactional id (1), CLUSTER_ACTION for a
    share-state key (2: only brokers ask); 0 when allowed."""
    if key_type == SHARE_KEY:
        if ctx.authorize(OP_CLUSTER_ACTION, RES_CLUSTER, CLUSTER_NAME):
            return 0
        return int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if key_type not in (0, TRANSACTION_KEY):
        return int(ErrorCode.INVALID_REQUEST)
    if key_type == TRANSACTION_KEY:
        if ctx.authorize(OP_DESCRIBE, RES_TRANSACTIONAL_ID, key):
            return 0
        return int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if ctx.authorize(OP_DESCRIBE, RES_GROUP, key):
        return 0
    return int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> dict:
    if code := _refused(ctx, key_type, key):
        return {"node_id": -1, "host": "", "port": -1, "error_code": code,
                "error_message": "not authorized"}
    ownership = ownership_of(ctx.broker)
    if ownership is None:
        return {"node_id": ctx.broker.config.broker_id, "host": ctx.broker.advertised_host,
                "port": ctx.broker.advertised_port, "error_code": 0, "error_message": None}
    if key_type == SHARE_KEY:  # share-partition state lives with the topic partition's owner
        head, _, partition = key.rpartition(":")
        topic_id = head.rpartition(":")[2]
        info = next((i for i in ctx.topics.topics().values() if str(i.topic_id) == topic_id), None)
        owner = (ownership.owner_of(info.name, int(partition))
                 if info is not None and partition.isdigit() else None)
    else:
        owner = ownership.coordinator_owner(key_type, key)
    if owner is None:
        return {"node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": "the coordinator partition has no live owner yet"}
    return {"node_id": owner.node_id, "host": owner.host, "port": owner.port,
            "error_code": 0, "error_message": None}


async def handle_find_coordinator(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    key_type = int(body.get("key_type", 0) or 0)
    if header.api_version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [
                {"key": key, **_coordinator(ctx, key_type, key)}
                for key in body.get("coordinator_keys") or []
            ],
        }
    return {"throttle_time_ms": 0, **_coordinator(ctx, key_type, body.get("key") or "")}
