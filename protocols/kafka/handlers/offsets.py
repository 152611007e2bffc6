"""Committed offsets: OffsetCommit, OffsetFetch (single-group and the v8+ multi-group form)
and OffsetDelete, answered from the broker's GroupCoordinator.

A commit is acknowledged only after the coordinator's offset store made it durable. A fetch of
a partition with nothing committed answers offset -1 (the client then applies its reset
policy). This module must never keep offsets of its own.
"""

from __future__ import annotations

import time
from typing import Any

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_coordinator import CommittedOffset, GroupError, OffsetKey

MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


async def handle_offset_commit(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    now_ms = int(time.time() * 1000)
    offsets: dict[OffsetKey, CommittedOffset] = {}
    codes: dict[OffsetKey, int] = {}
    known = ctx.topics.topics()
    for topic in body.get("topics") or []:
        name = topic["name"]
        info = known.get(name)
        for p in topic.get("partitions") or []:
            key = (name, p["partition_index"])
            metadata = p.get("committed_metadata")
            if info is None or not 0 <= key[1] < info.partitions:
                codes[key] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
                codes[key] = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                offsets[key] = CommittedOffset(
                    offset=p["committed_offset"],
                    leader_epoch=p.get("committed_leader_epoch", -1),
                    metadata=metadata,
                    commit_timestamp_ms=now_ms,
                )
    if offsets:
        try:
            await ctx.broker.group_coordinator.commit_offsets(
                group_id=body["group_id"],
                member_id=body.get("member_id") or "",
                generation_id=body.get("generation_id_or_member_epoch", -1),
                offsets=offsets,
            )
            codes.update({key: 0 for key in offsets})
        except GroupError as exc:
            codes.update({key: int(exc.code) for key in offsets})
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {"partition_index": p["partition_index"],
                     "error_code": codes[(topic["name"], p["partition_index"])]}
                    for p in topic.get("partitions") or []
                ],
            }
            for topic in body.get("topics") or []
        ],
    }


def _fetch_group(ctx: RequestContext, group_id: str, topics: list[dict] | None) -> list[dict]:
    coordinator = ctx.broker.group_coordinator
    if topics is None:  # every partition with a committed offset
        committed = coordinator.fetch_offsets(group_id, None)
        by_topic: dict[str, list[int]] = {}
        for name, partition in sorted(committed):
            by_topic.setdefault(name, []).append(partition)
        wanted = [{"name": n, "partition_indexes": ps} for n, ps in by_topic.items()]
    else:
        wanted = topics
        keys = [(t["name"], p) for t in topics for p in t.get("partition_indexes") or []]
        committed = coordinator.fetch_offsets(group_id, keys)
    answer: list[dict[str, Any]] = []
    for topic in wanted:
        partitions = []
        for index in topic.get("partition_indexes") or []:
            found = committed.get((topic["name"], index))
            partitions.append(
                {
                    "partition_index": index,
                    "committed_offset": found.offset if found else -1,
                    "committed_leader_epoch": found.leader_epoch if found else -1,
                    "metadata": (found.metadata if found else "") or "",
                    "error_code": 0,
                }
            )
        answer.append({"name": topic["name"], "partitions": partitions})
    return answer


async def handle_offset_fetch(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if header.api_version >= 8:
        return {
            "throttle_time_ms": 0,
            "groups": [
                {"group_id": g["group_id"],
                 "topics": _fetch_group(ctx, g["group_id"], g.get("topics")),
                 "error_code": 0}
                for g in body.get("groups") or []
            ],
        }
    return {
        "throttle_time_ms": 0,
        "topics": _fetch_group(ctx, body["group_id"], body.get("topics")),
        "error_code": 0,
    }


async def handle_offset_delete(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    keys = [
        (t["name"], p["partition_index"])
        for t in body.get("topics") or []
        for p in t.get("partitions") or []
    ]
    try:
        await ctx.broker.group_coordinator.delete_offsets(body["group_id"], keys)
        top = 0
    except GroupError as exc:
        top = int(exc.code)
    return {
        "error_code": top,
        "throttle_time_ms": 0,
        "topics": [
            {"name": t["name"],
             "partitions": [{"partition_index": p["partition_index"], "error_code": 0}
                            for p in t.get("partitions") or []]}
            for t in body.get("topics") or []
        ],
    }
