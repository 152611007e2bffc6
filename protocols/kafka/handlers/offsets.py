"""Committed offsets: OffsetCommit, OffsetFetch (single-group and the v8+ multi-group form)
and OffsetDelete, answered from the broker's GroupCoordinator.

A commit is acknowledged only after the coordinator's offset store made it durable. A fetch of
a partition with nothing committed answers offset -1 (the client then applies its reset
policy). This module must never keep offsets of its own.

Authorisation as Kafka's KafkaApis: a commit needs READ on the group and on each topic; a fetch
needs DESCRIBE on the group (v0/v1, which have no group error field, answer every partition
GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each topic: named topics the principal may not
describe are answered TOPIC_AUTHORIZATION_FAILED, and a fetch of every committed offset leaves
them out; a delete needs DELETE on the group and READ on each topic.
"""

from __future__ import annotations

import time
from typing import Any

from protocols.kafka.acl_model import OP_DELETE, OP_DESCRIBE, OP_READ
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.kafka.handlers.authorization import (
    group_denied_code,
    require_group,
    topic_denied_code,
)

MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


async def handle_offset_commit(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    now_ms = int(time.time() * 1000)
    offsets: dict[OffsetKey, CommittedOffset] = {}
    codes: dict[OffsetKey, int] = {}
    known = ctx.topics.topics()
    group_code = group_denied_code(ctx, OP_READ, body["group_id"])
    for topic in body.get("topics") or []:
        name = topic["name"]
        info = known.get(name)
        topic_code = group_code or topic_denied_code(ctx, OP_READ, name)
        for p in topic.get("partitions") or []:
            key = (name, p["partition_index"])
            metadata = p.get("committed_metadata")
            if topic_code:
                codes[key] = topic_code
            elif info is None or not 0 <= key[1] < info.partitions:
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
                group_instance_id=body.get("group_instance_id"),
            )
            codes.update({key: 0 for key in offsets})
        except KafkaProtocolError as exc:
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


def _unstable(ctx: RequestContext, group_id: str, require_stable: bool) -> set[OffsetKey]:
    """Partitions whose offsets wait in an open transaction (KIP-447), when asked to care."""
    transactions = getattr(ctx.broker, "transaction_coordinator", None)
    if not require_stable or transactions is None:
        return set()
    return transactions.pending_offset_partitions(group_id)


def _fetch_group(ctx: RequestContext, group_id: str, topics: list[dict] | None,
                 require_stable: bool = False, refused_code: int = 0) -> list[dict]:
    """The group's committed offsets; `refused_code` answers every partition with that code
    instead (the group itself refused, v0/v1)."""
    coordinator = ctx.broker.group_coordinator
    unstable = _unstable(ctx, group_id, require_stable)
    denied: dict[str, int] = {}
    if topics is None and refused_code:
        return []
    if topics is None:  # every partition with a committed offset the principal may see
        committed = coordinator.fetch_offsets(group_id, None)
        by_topic: dict[str, list[int]] = {}
        for name, partition in sorted(committed):
            by_topic.setdefault(name, []).append(partition)
        wanted: list[dict[str, Any]] = [
            {"name": n, "partition_indexes": ps} for n, ps in by_topic.items()
            if not topic_denied_code(ctx, OP_DESCRIBE, n)]
    else:
        wanted = topics
        denied = {t["name"]: refused_code or topic_denied_code(ctx, OP_DESCRIBE, t["name"])
                  for t in topics}
        keys = [(t["name"], p) for t in topics if not denied[t["name"]]
                for p in t.get("partition_indexes") or []]
        committed = coordinator.fetch_offsets(group_id, keys) if keys else {}
    answer: list[dict[str, Any]] = []
    for topic in wanted:
        partitions = []
        refused = denied.get(topic["name"], 0)
        for index in topic.get("partition_indexes") or []:
            found = None if refused else committed.get((topic["name"], index))
            code = refused or (int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
                               if (topic["name"], index) in unstable else 0)
            partitions.append(
                {
                    "partition_index": index,
                    "committed_offset": found.offset if found else -1,
                    "committed_leader_epoch": found.leader_epoch if found else -1,
                    "metadata": (found.metadata if found else "") or "",
                    "error_code": code,
                }
            )
        answer.append({"name": topic["name"], "partitions": partitions})
    return answer


async def handle_offset_fetch(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if header.api_version >= 8:
        groups = []
        for g in body.get("groups") or []:
            if denied := group_denied_code(ctx, OP_DESCRIBE, g["group_id"]):
                groups.append({"group_id": g["group_id"], "topics": [], "error_code": denied})
                continue
            try:  # v9: a KIP-848 member fetches with its member epoch
                ctx.broker.group_coordinator.consumer_groups.validate_offset_fetch(
                    g["group_id"], g.get("member_id"), g.get("member_epoch", -1))
            except KafkaProtocolError as exc:
                groups.append({"group_id": g["group_id"], "topics": [],
                               "error_code": int(exc.code)})
                continue
            groups.append({"group_id": g["group_id"],
                           "topics": _fetch_group(ctx, g["group_id"], g.get("topics"),
                                                  bool(body.get("require_stable"))),
                           "error_code": 0})
        return {"throttle_time_ms": 0, "groups": groups}
    if header.api_version >= 2:  # v2+ has a top-level error code to refuse with
        require_group(ctx, OP_DESCRIBE, body["group_id"])
        group_refused = 0
    else:
        group_refused = group_denied_code(ctx, OP_DESCRIBE, body["group_id"])
    return {
        "throttle_time_ms": 0,
        "topics": _fetch_group(ctx, body["group_id"], body.get("topics"),
                               bool(body.get("require_stable")), group_refused),
        "error_code": 0,
    }


async def handle_offset_delete(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    keys = [
        (t["name"], p["partition_index"])
        for t in body.get("topics") or []
        for p in t.get("partitions") or []
    ]
    require_group(ctx, OP_DELETE, body["group_id"])
    coordinator = ctx.broker.group_coordinator
    refused: dict[OffsetKey, int] = {
        key: code for key in keys if (code := topic_denied_code(ctx, OP_READ, key[0]))
    }
    keys = [key for key in keys if key not in refused]
    try:
        refused.update(coordinator.offset_delete_refusals(body["group_id"], keys))
        await coordinator.delete_offsets(body["group_id"], keys)
        top = 0
    except KafkaProtocolError as exc:
        top = int(exc.code)
    return {
        "error_code": top,
        "throttle_time_ms": 0,
        "topics": [
            {"name": t["name"],
             "partitions": [{"partition_index": p["partition_index"],
                             "error_code": refused.get((t["name"], p["partition_index"]), 0)}
                            for p in t.get("partitions") or []]}
            for t in body.get("topics") or []
        ],
    }
