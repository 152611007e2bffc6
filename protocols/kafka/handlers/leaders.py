"""ElectLeaders (43): `kafka-leader-election.sh`, AdminClient.electLeaders, answered as a system
with one owner per partition answers it.

Every partition has exactly one replica that Kafka clients see: its owner broker (standalone:
this broker; cluster: the ownership service's owner).  That replica is both the preferred and
the only eligible leader, so an election is never needed while the owner lives: each named
partition is answered ELECTION_NOT_NEEDED, for PREFERRED and UNCLEAN alike, as Kafka answers a
partition already led by its preferred replica.  A partition with no live owner right now
(cluster hand-over) is ELIGIBLE_LEADERS_NOT_AVAILABLE — ownership moves by itself, there is no
replica a client could promote.  Unknown topics or partitions are UNKNOWN_TOPIC_OR_PARTITION.
With `topic_partitions` null (elect all partitions) Kafka lists only the partitions it elected,
so the answer is empty.  An election type other than 0 (preferred) or 1 (unclean) is
INVALID_REQUEST and ALTER on the cluster is required (CLUSTER_AUTHORIZATION_FAILED otherwise);
such a refusal is the top-level code (v1+) and every named partition's, as in Kafka.

This module must never move ownership: elections are the ownership service's business.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import CLUSTER_NAME, OP_ALTER, RES_CLUSTER
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1


def _partition_result(ctx: RequestContext, topic: str, partition: int) -> tuple[int, str | None]:
    info = ctx.topics.topics().get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}"
    ownership = ownership_of(ctx.broker)
    if ownership is not None and ownership.owner_of(topic, partition) is None:
        return (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                "the partition's ownership is moving; its new owner leads it without election")
    return ErrorCode.ELECTION_NOT_NEEDED, "the partition's only replica already leads it"


async def handle_elect_leaders(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    election_type = int(body.get("election_type", PREFERRED))
    requested = body.get("topic_partitions")
    top_code = ErrorCode.NONE
    if not ctx.authorize(OP_ALTER, RES_CLUSTER, CLUSTER_NAME):
        top_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    elif election_type not in (PREFERRED, UNCLEAN):
        top_code = ErrorCode.INVALID_REQUEST
    results: list[dict[str, Any]] = []
    for item in requested or []:
        topic = str(item.get("topic", ""))
        partitions = []
        for index in item.get("partitions") or []:
            if top_code:
                code, message = int(top_code), None
            else:
                code, message = _partition_result(ctx, topic, int(index))
            partitions.append({"partition_id": int(index), "error_code": int(code),
                               "error_message": message})
        results.append({"topic": topic, "partition_result": partitions})
    return {"throttle_time_ms": 0, "error_code": int(top_code),
            "replica_election_results": results}
