"""OffsetForLeaderEpoch (key 23): every partition has had one leader epoch, 0.

A client validating its position after a leader change asks where an epoch ended.  Epoch 0 is
the only (and current) epoch, so for any requested epoch >= 0 the answer is epoch 0 ending at
the high watermark; a negative epoch is undefined (-1, -1).  A client claiming a current leader
epoch above 0 knows a leader this broker never had: UNKNOWN_LEADER_EPOCH.

Authorisation as Kafka's KafkaApis: CLUSTER_ACTION on the cluster (the API's inter-broker use),
else DESCRIBE on each topic (KIP-320's consumer use).  A topic the principal may not describe
is answered TOPIC_AUTHORIZATION_FAILED before its existence is looked at, so an unprivileged
client learns neither end offsets nor which topics exist.

This module must never invent epochs other than 0.
"""

from __future__ import annotations

from protocols.kafka.acl_model import CLUSTER_NAME, OP_CLUSTER_ACTION, OP_DESCRIBE, RES_CLUSTER
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.authorization import topic_denied_code
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.handlers.topic_lookup import open_partition


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    cluster_action = ctx.authorize(OP_CLUSTER_ACTION, RES_CLUSTER, CLUSTER_NAME)
    topics_out = []
    for t in body.get("topics") or []:
        name = t.get("topic")
        denied = 0 if cluster_action else topic_denied_code(ctx, OP_DESCRIBE, name or "")
        parts = []
        for p in t.get("partitions") or []:
            index = int(p.get("partition", 0))
            answer = {"error_code": denied, "partition": index, "leader_epoch": -1,
                      "end_offset": -1}
            if denied:
                parts.append(answer)
                continue
            try:
                plog = await open_partition(ctx, name, index)
                if int(p.get("current_leader_epoch", -1)) > 0:
                    answer["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
                elif int(p.get("leader_epoch", -1)) >= 0:
                    answer["leader_epoch"] = 0
                    answer["end_offset"] = plog.high_watermark
            except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                answer["error_code"] = error_code_of(exc)
            parts.append(answer)
        topics_out.append({"topic": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics_out}
