"""Describe (key 90), Alter (91) and Delete (92) ShareGroupOffsets: a share group's start offset
per partition, as Java's Admin listShareGroupOffsets / alterShareGroupOffsets /
deleteShareGroupOffsets use them.

Describe reports the share-partition start offset (-1 where the group has no state yet) and
needs DESCRIBE on the group and on each topic; null Topics means every partition where the group
has state.  Alter (READ on group and topics) starts the group over at the given offsets and
Delete (DELETE on the group, READ on the topics) drops its state; both need the group to have no
members (NON_EMPTY_GROUP).

This module must never keep state: it maps requests onto the broker's share groups.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import OP_DELETE, OP_DESCRIBE, OP_READ, RES_TOPIC
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.authorization import group_denied_code
from protocols.kafka.handlers.error_responses import ZERO_UUID, error_code_of, error_message_of
from protocols.kafka.handlers.share_groups import share_groups_of


def _topic_code(ctx: RequestContext, operation: int, name: str) -> int:
    if not ctx.authorize(operation, RES_TOPIC, name):  # before existence: reveal nothing
        return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if name not in ctx.topics.topics():
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return 0


def _topic_id(ctx: RequestContext, name: str) -> Any:
    info = ctx.topics.topics().get(name)
    return info.topic_id if info is not None else ZERO_UUID


async def handle_describe_share_group_offsets(ctx: RequestContext, header: RequestHeader,
                                              body: dict) -> dict:
    share = share_groups_of(ctx)
    groups = []
    for g in body.get("groups") or []:
        group_id = g.get("group_id") or ""
        entry: dict[str, Any] = {"group_id": group_id, "topics": [], "error_code": 0,
                                 "error_message": None}
        groups.append(entry)
        if denied := group_denied_code(ctx, OP_DESCRIBE, group_id):
            entry["error_code"] = denied
            continue
        wanted = g.get("topics")
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in await share.known_partitions(group_id):
                by_topic.setdefault(topic, []).append(partition)
            wanted = [{"topic_name": t, "partitions": ps} for t, ps in sorted(by_topic.items())]
        for t in wanted:
            name = t.get("topic_name") or ""
            code = _topic_code(ctx, OP_DESCRIBE, name)
            partitions = []
            for p in t.get("partitions") or []:
                out: dict[str, Any] = {"partition_index": int(p), "start_offset": -1,
                                       "leader_epoch": 0, "lag": -1, "error_code": code,
                                       "error_message": None}
                if not code:
                    try:
                        state = await share.state(group_id, name, int(p))
                        if state is not None:
                            out["start_offset"] = state.start_offset
                    except Exception as exc:  # noqa: BLE001 - becomes this partition's code
                        out["error_code"] = error_code_of(exc)
                        out["error_message"] = error_message_of(exc)
                partitions.append(out)
            entry["topics"].append({"topic_name": name, "topic_id": _topic_id(ctx, name),
                                    "partitions": partitions})
    return {"throttle_time_ms": 0, "groups": groups}


async def handle_alter_share_group_offsets(ctx: RequestContext, header: RequestHeader,
                                           body: dict) -> dict:
    share = share_groups_of(ctx)
    group_id = body.get("group_id") or ""
    denied = group_denied_code(ctx, OP_READ, group_id)
    group = share.coordinator.groups.get(group_id)
    if not denied and group is not None and group.members:
        denied = int(ErrorCode.NON_EMPTY_GROUP)  # Kafka answers this for the whole request
    responses = []
    for t in body.get("topics") or []:
        name = t.get("topic_name") or ""
        code = denied or _topic_code(ctx, OP_READ, name)
        partitions = []
        for p in t.get("partitions") or []:
            index = int(p["partition_index"])
            out: dict[str, Any] = {"partition_index": index, "error_code": code,
                   "error_message": None}
            if not code:
                try:
                    offset = int(p["start_offset"])
                    if offset < 0:
                        raise ValueError("start offset must be >= 0")
                    await share.alter_start(group_id, name, index, offset)
                except ValueError as exc:
                    out["error_code"] = int(ErrorCode.INVALID_REQUEST)
                    out["error_message"] = str(exc)
                except Exception as exc:  # noqa: BLE001 - becomes this partition's code
                    out["error_code"] = error_code_of(exc)
                    out["error_message"] = error_message_of(exc)
            partitions.append(out)
        responses.append({"topic_name": name, "topic_id": _topic_id(ctx, name),
                          "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": denied, "error_message": None,
            "responses": responses}


async def handle_delete_share_group_offsets(ctx: RequestContext, header: RequestHeader,
                                            body: dict) -> dict:
    share = share_groups_of(ctx)
    group_id = body.get("group_id") or ""
    if denied := group_denied_code(ctx, OP_DELETE, group_id):
        return {"throttle_time_ms": 0, "error_code": denied, "error_message": None,
                "responses": []}
    known = await share.known_partitions(group_id)
    responses = []
    for t in body.get("topics") or []:
        name = t.get("topic_name") or ""
        out: dict[str, Any] = {"topic_name": name, "topic_id": _topic_id(ctx, name),
                               "error_code": _topic_code(ctx, OP_READ, name), "error_message": None}
        if not out["error_code"]:
            try:
                for topic, partition in known:
                    if topic == name:
                        await share.forget(group_id, topic, partition)
            except Exception as exc:  # noqa: BLE001 - becomes this topic's code
                out["error_code"] = error_code_of(exc)
                out["error_message"] = error_message_of(exc)
        responses.append(out)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "responses": responses}
