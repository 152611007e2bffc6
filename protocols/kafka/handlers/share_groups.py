"""KIP-932 share-group membership on the wire: ShareGroupHeartbeat (key 76) and
ShareGroupDescribe (key 77), answered from the broker's ShareGroupCoordinator.

The wire names topics by id, the coordinator by name; this module translates.  In a cluster
only the group's coordinator broker answers (NOT_COORDINATOR elsewhere).  A member that
leaves (epoch -1) has the records it holds released.  ACLs as Kafka checks them: READ on the
group and DESCRIBE on every subscribed topic to heartbeat, DESCRIBE on the group to describe it.

This module must never keep group state.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from protocols.kafka.acl_model import OP_DESCRIBE, OP_READ
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.handlers.authorization import (
    group_denied_code,
    require_group,
    require_topic,
)
from protocols.kafka.share_api import ShareGroupsApi

NO_OPERATIONS = -(2**31)
ASSIGNOR_NAME = "simple"


def share_groups_of(ctx: RequestContext) -> ShareGroupsApi:
    share_groups: ShareGroupsApi = getattr(ctx.broker, "share_groups")  # noqa: B009
    return share_groups


def topic_ids(ctx: RequestContext) -> dict[str, uuid.UUID]:
    return {name: info.topic_id for name, info in ctx.topics.topics().items()}


def wire_assignment(
    partitions: frozenset[tuple[str, int]], ids: dict[str, uuid.UUID], with_names: bool = False
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = []
    for topic in sorted(t for t in by_topic if t in ids):
        entry: dict[str, Any] = {"topic_id": ids[topic], "partitions": sorted(by_topic[topic])}
        if with_names:
            entry["topic_name"] = topic
        out.append(entry)
    return out


async def handle_share_group_heartbeat(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    share = share_groups_of(ctx)
    group_id = body.get("group_id") or ""
    member_id = body.get("member_id") or ""
    try:
        require_group(ctx, OP_READ, group_id)
        for topic in body.get("subscribed_topic_names") or []:
            require_topic(ctx, OP_DESCRIBE, topic)
        share.check_coordinator(group_id)
        member, _ = share.coordinator.heartbeat(
            group_id=group_id,
            member_id=member_id,
            member_epoch=int(body["member_epoch"]),
            rack_id=body.get("rack_id"),
            subscribed_topic_names=body.get("subscribed_topic_names"),
            client_id=header.client_id or "",
            client_host="/" + ctx.client_host,
            topics={name: info.partitions for name, info in ctx.topics.topics().items()},
            now_ms=trio.current_time() * 1000,
        )
    except KafkaProtocolError as exc:
        return {"throttle_time_ms": 0, "error_code": int(exc.code), "error_message": exc.message,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0,
                "assignment": None}
    interval = share.coordinator.config.heartbeat_interval_ms
    if member is None:  # left: its records go back to the others
        await share.release_member(group_id, member_id)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "member_id": member_id, "member_epoch": -1, "heartbeat_interval_ms": interval,
                "assignment": None}
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": member.member_id,
        "member_epoch": member.member_epoch,
        "heartbeat_interval_ms": interval,
        "assignment": {"topic_partitions": wire_assignment(member.assigned, topic_ids(ctx))},
    }


async def handle_share_group_describe(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    share = share_groups_of(ctx)
    ids = topic_ids(ctx)
    known = set(await share.group_ids())
    described = []
    for group_id in body.get("group_ids") or []:
        entry: dict[str, Any] = {"error_code": 0, "error_message": None, "group_id": group_id,
                                 "group_state": "Dead", "group_epoch": -1,
                                 "assignment_epoch": -1, "assignor_name": "", "members": [],
                                 "authorized_operations": NO_OPERATIONS}
        denied = group_denied_code(ctx, OP_DESCRIBE, group_id)
        group = share.coordinator.groups.get(group_id)
        if not denied:
            try:
                share.check_coordinator(group_id)
            except KafkaProtocolError as exc:
                denied = int(exc.code)
        if denied:
            entry["error_code"] = denied
        elif group is None and group_id not in known:
            entry["error_code"] = int(ErrorCode.GROUP_ID_NOT_FOUND)
            entry["error_message"] = f"Group {group_id} not found."
        else:
            group = group or share.coordinator.ensure(group_id)
            entry.update(
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=ASSIGNOR_NAME,
                members=[
                    {
                        "member_id": m.member_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": sorted(m.subscribed_topics),
                        "assignment": {
                            "topic_partitions": wire_assignment(m.assigned, ids, True)
                        },
                    }
                    for m in group.members.values()
                ],
            )
        described.append(entry)
    return {"throttle_time_ms": 0, "groups": described}
