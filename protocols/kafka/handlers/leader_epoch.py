"""OffsetForLeaderEpoch (key 23): every partition has had one leader epoch, 0.

A client validating its position after a leader change asks where an epoch ended.  Epoch 0 is
the only (and current) epoch, so for any requested epoch >= 0 the answer is epoch 0 ending at
the high watermark; a negative epoch is undefined (-1, -1).  A client claiming a current leader
epoch above 0 knows a leader this broker never had: UNKNOWN_LEADER_EPOCH.

This module must never invent epochs other than 0.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.handlers.topic_lookup import open_partition


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    topics_out = []
    for t in body.get("topics") or []:
        name = t.get("topic")
        parts = []
        for p in t.get("partitions") or []:
            index = int(p.get("partition", 0))
            answer = {"error_code": 0, "partition": index, "leader_epoch": -1, "end_offset": -1}
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
