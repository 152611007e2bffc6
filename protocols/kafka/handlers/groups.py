"""Consumer-group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups and DeleteGroups, answered from the broker's GroupCoordinator.

The coordinator decides; these functions only translate between the wire shapes (which vary
by version) and its calls. A GroupError becomes the answer's top-level error code here.
Authorisation as Kafka's: READ on the group to join, sync, heartbeat and leave; DESCRIBE on it
to describe (DESCRIBE on the cluster lists every group, else ListGroups shows the describable
ones); DELETE on it to delete.
This module must never keep group state of its own.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_DELETE,
    OP_DESCRIBE,
    OP_READ,
    RES_CLUSTER,
    RES_GROUP,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.group_coordinator import GroupState
from protocols.kafka.handlers.authorization import group_denied_code, require_group

NO_OPERATIONS = -(2**31)  # "authorized operations not requested"


def _host(ctx: RequestContext) -> str:
    return "/" + ctx.client_address.rsplit(":", 1)[0]


async def handle_join_group(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    require_group(ctx, OP_READ, body["group_id"])
    coordinator = ctx.broker.group_coordinator
    try:
        answer = await coordinator.join(
            group_id=body["group_id"],
            member_id=body.get("member_id") or "",
            group_instance_id=body.get("group_instance_id"),
            protocol_type=body.get("protocol_type") or "",
            protocols=[(p["name"], bytes(p["metadata"])) for p in body.get("protocols") or []],
            session_timeout_ms=body["session_timeout_ms"],
            rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1),
            client_id=header.client_id or "",
            client_host=_host(ctx),
            require_known_member_id=header.api_version >= 4,
            reason=body.get("reason"),
        )
    except KafkaProtocolError as exc:
        answer = {"error_code": int(exc.code), "member_id": body.get("member_id") or ""}
    return {
        "throttle_time_ms": 0,
        "error_code": answer.get("error_code", 0),
        "generation_id": answer.get("generation_id", -1),
        "protocol_type": answer.get("protocol_type"),
        "protocol_name": answer.get("protocol_name")
        if answer.get("protocol_name") is not None or header.api_version >= 7
        else "",
        "leader": answer.get("leader", ""),
        "skip_assignment": bool(answer.get("skip_assignment", False)),
        "member_id": answer.get("member_id", ""),
        "members": answer.get("members", []),
    }


async def handle_sync_group(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    require_group(ctx, OP_READ, body["group_id"])
    try:
        protocol_type, protocol_name, assignment = await ctx.broker.group_coordinator.sync(
            group_id=body["group_id"],
            member_id=body["member_id"],
            generation_id=body["generation_id"],
            assignments=[
                (a["member_id"], bytes(a["assignment"])) for a in body.get("assignments") or []
            ],
            group_instance_id=body.get("group_instance_id"),
            protocol_type=body.get("protocol_type"),
            protocol_name=body.get("protocol_name"),
        )
        code = 0
    except KafkaProtocolError as exc:
        protocol_type, protocol_name, assignment, code = None, None, b"", int(exc.code)
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "assignment": assignment,
    }


async def handle_heartbeat(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    require_group(ctx, OP_READ, body["group_id"])
    try:
        ctx.broker.group_coordinator.heartbeat(
            group_id=body["group_id"],
            member_id=body["member_id"],
            generation_id=body["generation_id"],
            group_instance_id=body.get("group_instance_id"),
        )
        code = 0
    except KafkaProtocolError as exc:
        code = int(exc.code)
    return {"throttle_time_ms": 0, "error_code": code}


async def handle_leave_group(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    require_group(ctx, OP_READ, body["group_id"])
    if header.api_version >= 3:
        leaving = [(m.get("member_id") or "", m.get("group_instance_id")) for m in body["members"]]
    else:
        leaving = [(body["member_id"], None)]
    codes = await ctx.broker.group_coordinator.leave(body["group_id"], leaving)
    members = [
        {"member_id": mid, "group_instance_id": iid, "error_code": code}
        for (mid, iid), code in zip(leaving, codes, strict=True)
    ]
    top = 0 if header.api_version >= 3 else codes[0]
    return {"throttle_time_ms": 0, "error_code": top, "members": members}


async def handle_describe_groups(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    coordinator = ctx.broker.group_coordinator
    described: list[dict[str, Any]] = []
    for group_id in body.get("groups") or []:
        if denied := group_denied_code(ctx, OP_DESCRIBE, group_id):
            described.append(
                {"error_code": denied, "group_id": group_id, "group_state": "",
                 "protocol_type": "", "protocol_data": "", "members": [],
                 "authorized_operations": NO_OPERATIONS}
            )
            continue
        consumer_group = coordinator.consumer_groups.described(group_id)
        if consumer_group is not None:
            described.append(_describe_consumer_group_classically(consumer_group))
            continue
        group = coordinator.describe(group_id)
        if group is None:
            described.append(
                {"error_code": 0, "group_id": group_id, "group_state": "Dead",
                 "protocol_type": "", "protocol_data": "", "members": [],
                 "authorized_operations": NO_OPERATIONS}
            )
            continue
        stable = group.state is GroupState.STABLE
        described.append(
            {
                "error_code": 0,
                "group_id": group_id,
                "group_state": group.state.value,
                "protocol_type": group.protocol_type or "",
                "protocol_data": (group.protocol_name or "") if stable else "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(group.protocol_name or "")
                        if stable
                        else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in group.members.values()
                ],
                "authorized_operations": NO_OPERATIONS,
            }
        )
    return {"throttle_time_ms": 0, "groups": described}


def _describe_consumer_group_classically(group: Any) -> dict[str, Any]:
    """A KIP-848 group in DescribeGroups' shape (its members carry no classic metadata)."""
    return {
        "error_code": 0, "group_id": group.group_id, "group_state": group.state.value,
        "protocol_type": "consumer", "protocol_data": group.assignor_name,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "member_metadata": b"", "member_assignment": b""}
            for m in group.members.values()
        ],
        "authorized_operations": NO_OPERATIONS,
    }


async def handle_list_groups(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    coordinator = ctx.broker.group_coordinator
    wanted_states = {s.lower() for s in body.get("states_filter") or []}
    wanted_types = {t.lower() for t in body.get("types_filter") or []}
    listed = []
    # As Kafka: DESCRIBE on the cluster lists every group, else only the describable ones.
    every_group = ctx.authorize(OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME)
    for group_id in coordinator.known_group_ids():
        if not every_group and not ctx.authorize(OP_DESCRIBE, RES_GROUP, group_id):
            continue
        consumer_group = coordinator.consumer_groups.described(group_id)
        if consumer_group is not None:
            state = consumer_group.state.value
            if (wanted_states and state.lower() not in wanted_states) or (
                wanted_types and "consumer" not in wanted_types
            ):
                continue
            listed.append({"group_id": group_id, "protocol_type": "consumer",
                           "group_state": state, "group_type": "consumer"})
            continue
        group = coordinator.describe(group_id)
        state = group.state.value if group is not None else GroupState.EMPTY.value
        if wanted_states and state.lower() not in wanted_states:
            continue
        if wanted_types and "classic" not in wanted_types:
            continue
        listed.append(
            {"group_id": group_id,
             "protocol_type": (group.protocol_type if group is not None else None) or "consumer",
             "group_state": state, "group_type": "classic"}
        )
    share_groups = getattr(ctx.broker, "share_groups", None)
    share_ids = await share_groups.group_ids() if share_groups is not None else []
    classic_ids = set(coordinator.known_group_ids())
    for group_id in (g for g in share_ids if g not in classic_ids):
        if not every_group and not ctx.authorize(OP_DESCRIBE, RES_GROUP, group_id):
            continue
        assert share_groups is not None
        share_group = share_groups.coordinator.groups.get(group_id)
        state = share_group.state if share_group is not None else "Empty"
        if (wanted_states and state.lower() not in wanted_states) or (
            wanted_types and "share" not in wanted_types
        ):
            continue
        listed.append({"group_id": group_id, "protocol_type": "share", "group_state": state,
                       "group_type": "share"})
    return {"throttle_time_ms": 0, "error_code": 0, "groups": listed}


async def handle_delete_groups(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    results = []
    for group_id in body.get("groups_names") or []:
        if denied := group_denied_code(ctx, OP_DELETE, group_id):
            results.append({"group_id": group_id, "error_code": denied})
            continue
        share_groups = getattr(ctx.broker, "share_groups", None)
        try:
            if (share_groups is not None
                    and group_id not in ctx.broker.group_coordinator.known_group_ids()
                    and group_id in await share_groups.group_ids()):
                await share_groups.delete_group(group_id)
            else:
                await ctx.broker.group_coordinator.delete_group(group_id)
            code = 0
        except KafkaProtocolError as exc:
            code = int(exc.code)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}


__all__ = [
    "handle_join_group",
    "handle_sync_group",
    "handle_heartbeat",
    "handle_leave_group",
    "handle_describe_groups",
    "handle_list_groups",
    "handle_delete_groups",
    "ErrorCode",
]
