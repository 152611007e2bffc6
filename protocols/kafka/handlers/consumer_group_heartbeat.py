"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat (key 68) and
ConsumerGroupDescribe (key 69), answered from the ConsumerGroupCoordinator that the broker's
group coordinator holds.

The wire names topics by id; the coordinator works with names. This module translates (an
owned partition of a topic id the broker does not know is dropped — the topic is gone) and
turns coordinator errors into the answer's error code. It must never keep group state.

Authorisation as Kafka's KafkaApis: a heartbeat needs READ on the group and DESCRIBE on every
topic it subscribes to by name (else TOPIC_AUTHORIZATION_FAILED: a client may not learn of
topics it cannot describe through its assignment); a describe needs DESCRIBE on each group
(GROUP_AUTHORIZATION_FAILED), and DESCRIBE on every topic the group's members are assigned or
targeted, else that group is answered TOPIC_AUTHORIZATION_FAILED without its members.
"""

from __future__ import annotations

import uuid
from typing import Any

from protocols.kafka.acl_model import OP_DESCRIBE, OP_READ, RES_GROUP, RES_TOPIC
from protocols.kafka.assignors import TopicPartition
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.handlers.authorization import require_group

NO_OPERATIONS = -(2**31)
HIDDEN_TOPICS_MESSAGE = (
    "The group has described topic(s) that the client is not authorized to describe.")


def _host(ctx: RequestContext) -> str:
    return "/" + ctx.client_address.rsplit(":", 1)[0]


def _by_id(
    ctx: RequestContext,
) -> tuple[dict[uuid.UUID, str], dict[str, uuid.UUID], dict[str, int]]:
    ids: dict[uuid.UUID, str] = {}
    names: dict[str, uuid.UUID] = {}
    counts: dict[str, int] = {}
    for name, info in ctx.topics.topics().items():
        ids[info.topic_id] = name
        names[name] = info.topic_id
        counts[name] = info.partitions
    return ids, names, counts


def _wire_partitions(
    partitions: frozenset[TopicPartition], names: dict[str, uuid.UUID], with_names: bool = False
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = []
    for topic in sorted(by_topic):
        if topic not in names:
            continue
        entry: dict[str, Any] = {"topic_id": names[topic], "partitions": sorted(by_topic[topic])}
        if with_names:
            entry["topic_name"] = topic
        out.append(entry)
    return out


def _heartbeat_error(code: int, message: str | None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "error_message": message,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _refused_group(group_id: str, code: int, message: str) -> dict[str, Any]:
    return {
        "error_code": int(code),
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": NO_OPERATIONS,
    }


def _group_topics(group: Any) -> set[str]:
    """Every topic a member of the group is assigned or targeted."""
    topics = {topic for m in group.members.values() for topic, _ in m.assigned}
    topics.update(topic for assigned in group.target.values() for topic, _ in assigned)
    return topics


async def handle_consumer_group_heartbeat(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    require_group(ctx, OP_READ, body["group_id"])
    subscribed = body.get("subscribed_topic_names") or []
    if any(not ctx.authorize(OP_DESCRIBE, RES_TOPIC, name) for name in set(subscribed)):
        return _heartbeat_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                "not authorized to describe every subscribed topic")
    ids, names, counts = _by_id(ctx)
    owned_wire = body.get("topic_partitions")
    owned = None
    if owned_wire is not None:
        owned = frozenset(
            (ids[t["topic_id"]], p)
            for t in owned_wire
            if t["topic_id"] in ids
            for p in t.get("partitions") or []
        )
    try:
        answer = await ctx.broker.group_coordinator.consumer_group_heartbeat(
            group_id=body["group_id"],
            member_id=body.get("member_id") or "",
            member_epoch=body["member_epoch"],
            instance_id=body.get("instance_id"),
            rack_id=body.get("rack_id"),
            rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1),
            subscribed_topic_names=body.get("subscribed_topic_names"),
            subscribed_topic_regex=body.get("subscribed_topic_regex"),
            server_assignor=body.get("server_assignor"),
            owned=owned,
            client_id=header.client_id or "",
            client_host=_host(ctx),
            topics=counts,
        )
    except KafkaProtocolError as exc:
        return _heartbeat_error(exc.code, exc.message)
    assignment = answer["assignment"]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": answer["member_id"],
        "member_epoch": answer["member_epoch"],
        "heartbeat_interval_ms": answer["heartbeat_interval_ms"],
        "assignment": None
        if assignment is None
        else {"topic_partitions": _wire_partitions(assignment, names)},
    }


async def handle_consumer_group_describe(
    ctx: RequestContext, header: RequestHeader, body: dict
) -> dict:
    _, names, _ = _by_id(ctx)
    coordinator = ctx.broker.group_coordinator.consumer_groups
    described = []
    for group_id in body.get("group_ids") or []:
        if not ctx.authorize(OP_DESCRIBE, RES_GROUP, group_id):
            described.append(_refused_group(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                            f"not authorized to describe group {group_id}"))
            continue
        group = coordinator.described(group_id)
        if group is not None and any(not ctx.authorize(OP_DESCRIBE, RES_TOPIC, topic)
                                     for topic in _group_topics(group)):
            described.append(_refused_group(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                            HIDDEN_TOPICS_MESSAGE))
            continue
        if group is None:
            described.append(
                {
                    "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND),
                    "error_message": f"Group {group_id} not found.",
                    "group_id": group_id,
                    "group_state": "Dead",
                    "group_epoch": -1,
                    "assignment_epoch": -1,
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": NO_OPERATIONS,
                }
            )
            continue
        described.append(
            {
                "error_code": 0,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": sorted(m.subscribed_topics),
                        "subscribed_topic_regex": m.subscribed_regex,
                        "assignment": {
                            "topic_partitions": _wire_partitions(m.assigned, names, True)
                        },
                        "target_assignment": {
                            "topic_partitions": _wire_partitions(
                                group.target.get(m.member_id, frozenset()), names, True
                            )
                        },
                    }
                    for m in group.members.values()
                ],
                "authorized_operations": NO_OPERATIONS,
            }
        )
    return {"throttle_time_ms": 0, "groups": described}
