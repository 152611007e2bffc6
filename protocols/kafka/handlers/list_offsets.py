"""ListOffsets (key 2): offsets by timestamp, and the special earliest/latest/max-timestamp.

Special timestamps (Kafka's ListOffsetsRequest): -1 latest (the high watermark, or the last
stable offset under read_committed), -2 earliest (log start), -3 the record with the largest
timestamp (KIP-734), -4 earliest local (same as earliest: every byte is "local" to the ledger
store), -5 earliest pending upload (none: -1).  Any other timestamp finds the first offset
whose timestamp is at or after it; none gives offset -1.  v0 answers in `old_style_offsets`.

This module must never scan records itself: the partition log owns its time index.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import OP_DESCRIBE
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.handlers.authorization import require_topic
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.handlers.topic_lookup import open_partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
READ_COMMITTED = 1


async def _lookup(ctx: RequestContext, topic: str, p: dict[str, Any], read_committed: bool,
                  version: int) -> dict:
    index = int(p.get("partition_index", 0))
    answer: dict[str, Any] = {"partition_index": index, "error_code": 0,
                              "old_style_offsets": [], "timestamp": -1, "offset": -1,
                              "leader_epoch": 0}
    try:
        require_topic(ctx, OP_DESCRIBE, topic)
        plog = await open_partition(ctx, topic, index)
        ts = int(p.get("timestamp", LATEST))
        found: tuple[int, int] | None
        if ts == LATEST:
            found = (plog.last_stable_offset if read_committed else plog.high_watermark, -1)
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            found = (plog.log_start_offset, -1)
        elif ts == EARLIEST_PENDING_UPLOAD:
            found = None
        elif ts == MAX_TIMESTAMP:
            found = await plog.max_timestamp_offset()
        else:
            found = await plog.offset_for_timestamp(ts)
            if found is not None and read_committed and found[0] >= plog.last_stable_offset:
                found = None
        if found is not None:
            answer["offset"], answer["timestamp"] = found
        if version == 0 and found is not None and int(p.get("max_num_offsets", 1)) > 0:
            answer["old_style_offsets"] = [found[0]]
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        answer["error_code"] = error_code_of(exc)
        answer["leader_epoch"] = -1
    return answer


async def handle_list_offsets(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    read_committed = body.get("isolation_level", 0) == READ_COMMITTED
    topics_out = []
    for t in body.get("topics") or []:
        name = t.get("name")
        parts = [await _lookup(ctx, name, p, read_committed, header.api_version)
                 for p in t.get("partitions") or []]
        topics_out.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics_out}
