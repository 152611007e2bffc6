"""Consumer groups for operators: list, describe with lag per partition, reset offsets.

Lag is the partition's log end offset (high watermark) minus the group's committed offset
(Kafka's definition, as kafka-consumer-groups prints it); a partition the group never committed
to shows no lag.  Offsets are reset with an admin commit (generation -1, no member), which the
coordinator refuses while the group has live members -- the same rule kafka-consumer-groups
--reset-offsets follows.

This module must never change a group other than through the group coordinator.
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.admin.http_server import HttpError
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.group_model import CommittedOffset, wall_clock_ms

RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")


def _state_of(coordinator: Any, group_id: str) -> tuple[str, int, str]:
    """(state, member count, protocol) of a classic or KIP-848 group."""
    if coordinator.consumer_groups.owns(group_id):
        members = 1 if coordinator.consumer_groups.has_members(group_id) else 0
        return ("Stable" if members else "Empty"), members, "consumer"
    group = coordinator.describe(group_id)
    if group is None:
        return "Dead", 0, ""
    return group.state.value, len(group.members), group.protocol_type or ""


def list_groups(coordinator: Any) -> list[dict[str, Any]]:
    out = []
    for group_id in coordinator.known_group_ids():
        state, members, protocol = _state_of(coordinator, group_id)
        out.append({"group": group_id, "state": state, "members": members,
                    "protocol_type": protocol})
    return out


def decode_assignment(data: bytes) -> list[dict[str, Any]]:
    """The topic partitions of a classic consumer's assignment (ConsumerProtocolAssignment:
    int16 version, then [topic string, [int32 partition]]); [] when it is not one."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(0, min(count, 10_000))):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + length].decode("utf-8")
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = list(struct.unpack_from(f">{max(0, min(n, 100_000))}i", data, pos))
            pos += 4 * len(partitions)
            out.append({"topic": topic, "partitions": sorted(partitions)})
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def member_details(coordinator: Any, group_id: str) -> list[dict[str, Any]]:
    """Members of a group with their client, host and assigned partitions."""
    if coordinator.consumer_groups.owns(group_id):
        group = coordinator.consumer_groups.described(group_id)
        if group is None:
            return []
        rows = []
        for m in group.members.values():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in m.assigned:
                by_topic.setdefault(topic, []).append(partition)
            rows.append({"member_id": m.member_id, "client_id": m.client_id,
                         "client_host": m.client_host,
                         "assignment": [{"topic": t, "partitions": sorted(p)}
                                        for t, p in sorted(by_topic.items())]})
        return rows
    classic = coordinator.describe(group_id)
    if classic is None:
        return []
    return [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
             "assignment": decode_assignment(m.assignment)
             if (classic.protocol_type or "") == "consumer" else []}
            for m in classic.members.values()]


async def _log_end(topics: Any, topic: str, partition: int) -> tuple[int | None, int | None]:
    try:
        plog = await topics.partition(topic, partition)
    except KafkaProtocolError:
        return None, None
    return plog.log_start_offset, plog.high_watermark


async def describe_group(coordinator: Any, topics: Any, group_id: str) -> dict[str, Any]:
    committed = coordinator.offsets.get(group_id) or {}
    state, members, protocol = _state_of(coordinator, group_id)
    if state == "Dead" and not committed:
        raise HttpError(404, f"group {group_id!r} does not exist")
    partitions = []
    for (topic, partition), offset in sorted(committed.items()):
        start, end = await _log_end(topics, topic, partition)
        lag = None if end is None or offset.offset < 0 else max(0, end - offset.offset)
        partitions.append({"topic": topic, "partition": partition,
                           "committed_offset": offset.offset, "log_start_offset": start,
                           "log_end_offset": end, "lag": lag})
    return {"group": group_id, "state": state, "members": members, "protocol_type": protocol,
            "partitions": partitions, "member_details": member_details(coordinator, group_id),
            "total_lag": sum(p["lag"] or 0 for p in partitions)}


async def share_group_rows(share_groups: Any) -> list[dict[str, Any]]:
    """Kafka share groups for the group listing (`share_groups`: gateway.kafka.share_groups)."""
    if share_groups is None:
        return []
    rows = []
    for group_id in await share_groups.group_ids():
        group = share_groups.coordinator.groups.get(group_id)
        rows.append({"group": group_id, "state": group.state if group is not None else "Empty",
                     "members": len(group.members) if group is not None else 0,
                     "protocol_type": "share"})
    return rows


async def describe_share_group(share_groups: Any, topics: Any,
                               group_id: str) -> dict[str, Any] | None:
    """A share group's members and, per partition, its start offset, in-flight and archived
    records and lag (records from the start offset not yet acknowledged or archived); None
    when `group_id` is no share group."""
    if share_groups is None or group_id not in await share_groups.group_ids():
        return None
    group = share_groups.coordinator.groups.get(group_id)
    partitions = []
    for topic, partition in await share_groups.known_partitions(group_id):
        state = await share_groups.state(group_id, topic, partition)
        if state is None:
            continue
        start, end = await _log_end(topics, topic, partition)
        done_in_window = state.end_offset - state.start_offset - state.in_flight
        lag = None if end is None else max(0, end - state.start_offset - done_in_window)
        partitions.append({"topic": topic, "partition": partition,
                           "committed_offset": state.start_offset,
                           "start_offset": state.start_offset, "log_start_offset": start,
                           "log_end_offset": end, "in_flight": state.in_flight,
                           "archived": state.archived, "lag": lag})
    members = [] if group is None else [
        {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
         "assignment": sorted(f"{t}-{p}" for t, p in m.assigned)}
        for m in group.members.values()]
    return {"group": group_id, "state": group.state if group is not None else "Empty",
            "members": len(members), "protocol_type": "share", "partitions": partitions,
            "member_details": members, "total_lag": sum(p["lag"] or 0 for p in partitions)}


def lag_of_open_partitions(coordinator: Any, topics: Any) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, lag) for committed offsets on partitions open here (metrics:
    a scrape must not open partitions)."""
    open_logs = topics.open_partitions()
    rows = []
    for group_id, committed in sorted(coordinator.offsets.items()):
        for (topic, partition), offset in sorted(committed.items()):
            plog = open_logs.get((topic, partition))
            if plog is None or offset.offset < 0:
                continue
            rows.append((group_id, topic, partition, max(0, plog.high_watermark - offset.offset)))
    return rows


async def reset_offsets(coordinator: Any, topics: Any, group_id: str,
                        request: dict[str, Any]) -> dict[str, Any]:
    """Body: {"topic", "partitions": [..] (default all), "to": earliest|latest|timestamp|offset,
    "value": N (timestamp ms or offset)}."""
    topic = request.get("topic")
    target = request.get("to")
    if not isinstance(topic, str) or target not in RESET_TARGETS:
        raise HttpError(400, f"need a topic and to in {RESET_TARGETS}")
    info = topics.topics().get(topic) or await topics.refresh_topic(topic)
    if info is None:
        raise HttpError(404, f"topic {topic!r} does not exist")
    wanted = request.get("partitions") or list(range(info.partitions))
    value = request.get("value")
    if target in ("timestamp", "offset") and (isinstance(value, bool)
                                               or not isinstance(value, int)):
        raise HttpError(400, f"to={target} needs an integer value")
    number = value if isinstance(value, int) else 0
    new: dict[tuple[str, int], CommittedOffset] = {}
    for partition in wanted:
        if not isinstance(partition, int) or not 0 <= partition < info.partitions:
            raise HttpError(400, f"no partition {partition!r} in {topic}")
        plog = await topics.partition(topic, partition)
        if target == "earliest":
            offset = plog.log_start_offset
        elif target == "latest":
            offset = plog.high_watermark
        elif target == "timestamp":
            found = await plog.offset_for_timestamp(number)
            offset = plog.high_watermark if found is None else found[0]
        else:
            offset = min(max(number, plog.log_start_offset), plog.high_watermark)
        new[(topic, partition)] = CommittedOffset(offset, -1, "", wall_clock_ms())
    try:
        await coordinator.commit_offsets(group_id=group_id, member_id="", generation_id=-1,
                                         offsets=new)
    except KafkaProtocolError as exc:
        raise HttpError(409, f"group {group_id!r} cannot be reset now ({exc.code.name}): "
                             "it has active members") from exc
    return {"group": group_id, "topic": topic,
            "offsets": {str(p): o.offset for (_, p), o in sorted(new.items())}}
