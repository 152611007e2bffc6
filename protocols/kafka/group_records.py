"""Durable group metadata: the record form of classic and KIP-848 groups, and its writer.

Kafka keeps each group's metadata in `__consumer_offsets` (GroupMetadata records; for KIP-848
the ConsumerGroup* records) and reloads it whenever a coordinator loads the partition, so a
restart or a coordinator move is invisible to a member whose session has not expired. Here
the coordinator does the same through the offset store it is given (`OffsetStoreApi`):

Record format. One record per group id holds that group's whole metadata as a JSON-able
dict with its own format version `gv` (1) and `protocol`:

  classic:  state (Empty | PreparingRebalance | CompletingRebalance | Stable), generation,
            protocol_type, protocol_name, leader, state_since_ms (wall clock, for offset
            retention), members [{id, instance, client_id, client_host, session_ms,
            rebalance_ms, protocol_type, protocols [[name, base64 metadata]], assignment
            (base64)}]
  consumer: group_epoch, assignment_epoch, assignor, subscribed {topic: partitions},
            target {member: [[topic, partition]]}, members [{id, instance, rack, client_id,
            client_host, topics, regex, assignor, rebalance_ms, epoch, previous_epoch,
            assigned, revoking, left_temporarily}]

A missing group (deleted, or dead after its offsets expired) is a tombstone (None). Timing
(last heartbeats, revocation deadlines) and transient join state (pending member ids,
JoinGroups in flight) are not recorded.

When written. Before any answer that reveals a change: a JoinGroup answer (the generation,
the leader, the member list), a SyncGroup answer (the assignment), a static member's new id,
a LeaveGroup answer, a ConsumerGroupHeartbeat answer (epochs and assignment), a deleted
group; and after a background change (session expiry, a rebalance ending with no members).
The writer (`GroupStateWriter`) compares the group's record with the last one it issued for
that id: an unchanged group costs no write (the answer then waits for that earlier write if
it is still in flight), so a heartbeat that changes nothing writes nothing; a
ConsumerGroupHeartbeat that changed neither the group's epochs and members nor its own
member's row does not even encode the group (`consumer_fingerprint`), unless the group's
last write failed. Appends to the log are ordered, so an answer sent after its own write is
durable never reveals a state that a later load would not see.

How loaded. `GroupCoordinator.run` loads the committed offsets and then these records; every
member's session counts from the load, a revocation deadline from the load too. A classic
group recorded in PreparingRebalance starts its rebalance again at load (members learn of it
from their next heartbeat); one in CompletingRebalance waits for its leader's SyncGroup. A
record this version cannot read is skipped with a WARNING (its members rejoin), never a crash.

The store keeps the latest record per group id and puts all of them in its snapshots, as it
does with committed offsets, so compaction of the log keeps exactly the live groups. The
whole group is written each time (not one record per member, as Kafka does): simple, and a
group of a few hundred members stays small.

This module must never do I/O of its own: records go through the store it is given.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocols.kafka.consumer_group_coordinator import (
    ConsumerGroup,
    ConsumerGroupCoordinator,
    ConsumerMember,
)
from protocols.kafka.group_model import Group, GroupState, Member

log = logging.getLogger("ledgerwire.kafka.groups")

RECORD_VERSION = 1
GroupRecord = dict[str, Any]


class GroupRecordError(ValueError):
    """A stored group record this version cannot read."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _partitions(tps: frozenset[tuple[str, int]]) -> list[list[Any]]:
    return [[topic, partition] for topic, partition in sorted(tps)]


def _tps(rows: list[list[Any]]) -> frozenset[tuple[str, int]]:
    return frozenset((str(topic), int(partition)) for topic, partition in rows)


# ---- classic groups -----------------------------------------------------------------------------


def encode_classic(group: Group) -> GroupRecord:
    return {
        "gv": RECORD_VERSION,
        "protocol": "classic",
        "state": group.state.value,
        "generation": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id,
        "state_since_ms": group.state_since_ms,
        "members": [
            {
                "id": m.member_id,
                "instance": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_ms": round(m.session_timeout_s * 1000),
                "rebalance_ms": round(m.rebalance_timeout_s * 1000),
                "protocol_type": m.protocol_type,
                "protocols": [[name, _b64(meta)] for name, meta in m.protocols],
                "assignment": _b64(m.assignment),
            }
            for m in group.members.values()
        ],
    }


def decode_classic(group_id: str, record: GroupRecord, now: float) -> Group:
    """The group a record describes; every member's session starts at `now` (Trio time)."""
    try:
        state = GroupState(record["state"])
        if state is GroupState.DEAD:
            raise GroupRecordError("a dead group is never recorded")
        group = Group(
            group_id,
            state=state,
            generation_id=int(record["generation"]),
            protocol_type=record["protocol_type"],
            protocol_name=record["protocol_name"],
            leader_id=record["leader"],
            state_since_ms=int(record["state_since_ms"]),
        )
        for row in record["members"]:
            member = Member(
                str(row["id"]), row["instance"], str(row["client_id"]), str(row["client_host"]),
                row["session_ms"] / 1000.0, row["rebalance_ms"] / 1000.0,
                str(row["protocol_type"]),
                [(str(name), _unb64(meta)) for name, meta in row["protocols"]],
                assignment=_unb64(row["assignment"]), last_heartbeat=now,
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
    except GroupRecordError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise GroupRecordError(f"unreadable classic group record: {exc!r}") from None
    if group.members and group.state is GroupState.EMPTY:
        raise GroupRecordError("an Empty group recorded with members")
    return group


# ---- KIP-848 consumer groups --------------------------------------------------------------------


def encode_consumer(group: ConsumerGroup) -> GroupRecord:
    return {
        "gv": RECORD_VERSION,
        "protocol": "consumer",
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": group.assignor_name,
        "subscribed": dict(sorted(group.subscribed_partitions.items())),
        "target": {mid: _partitions(tps) for mid, tps in sorted(group.target.items())},
        "members": [encode_consumer_member(m) for m in group.members.values()],
    }


def encode_consumer_member(m: ConsumerMember) -> GroupRecord:
    return {
        "id": m.member_id,
        "instance": m.instance_id,
        "rack": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "topics": sorted(m.subscribed_topics),
        "regex": m.subscribed_regex,
        "assignor": m.server_assignor,
        "rebalance_ms": round(m.rebalance_timeout_s * 1000),
        "epoch": m.member_epoch,
        "previous_epoch": m.previous_epoch,
        "assigned": _partitions(m.assigned),
        "revoking": _partitions(m.pending_revocation),
        "left_temporarily": m.left_temporarily,
    }


def consumer_fingerprint(group: ConsumerGroup | None, member_id: str) -> Any:
    """What one member's heartbeat can change in its group's record: the group's epochs,
    assignor and member ids, and that member's row. (Anything else in the record — the
    target, the subscribed partitions — changes only with the group epoch.) None when the
    group or the member does not exist."""
    if group is None or member_id not in group.members:
        return None
    return (group.group_epoch, group.assignment_epoch, group.assignor_name,
            tuple(group.members), encode_consumer_member(group.members[member_id]))


def decode_consumer(group_id: str, record: GroupRecord, now: float) -> ConsumerGroup:
    """The group a record describes; sessions and revocation deadlines start at `now`."""
    try:
        group = ConsumerGroup(
            group_id,
            group_epoch=int(record["group_epoch"]),
            assignment_epoch=int(record["assignment_epoch"]),
            subscribed_partitions={str(t): int(n) for t, n in record["subscribed"].items()},
            target={str(mid): _tps(rows) for mid, rows in record["target"].items()},
            assignor_name=str(record["assignor"]),
        )
        for row in record["members"]:
            member = ConsumerMember(
                str(row["id"]), row["instance"], row["rack"], str(row["client_id"]),
                str(row["client_host"]),
                subscribed_topics=frozenset(str(t) for t in row["topics"]),
                subscribed_regex=row["regex"],
                server_assignor=row["assignor"],
                rebalance_timeout_s=row["rebalance_ms"] / 1000.0,
                member_epoch=int(row["epoch"]),
                previous_epoch=int(row["previous_epoch"]),
                assigned=_tps(row["assigned"]),
                pending_revocation=_tps(row["revoking"]),
                last_heartbeat=now,
                left_temporarily=bool(row["left_temporarily"]),
            )
            if member.pending_revocation:
                member.revoke_deadline = now + member.rebalance_timeout_s
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GroupRecordError(f"unreadable consumer group record: {exc!r}") from None
    return group


def decode(group_id: str, record: GroupRecord, now: float) -> Group | ConsumerGroup:
    """A classic `Group` or a KIP-848 `ConsumerGroup`; GroupRecordError if unreadable."""
    if not isinstance(record, dict) or record.get("gv") != RECORD_VERSION:
        version = record.get("gv") if isinstance(record, dict) else None
        raise GroupRecordError(f"group record of unknown format version {version!r}")
    if record.get("protocol") == "classic":
        return decode_classic(group_id, record, now)
    if record.get("protocol") == "consumer":
        return decode_consumer(group_id, record, now)
    raise GroupRecordError(f"group record of unknown protocol {record.get('protocol')!r}")


# ---- the writer ---------------------------------------------------------------------------------


_UNKNOWN: Any = object()  # after a failed write: whatever is stored, write again


class _Issued:
    """The last record issued for one group id, and whether it is durable yet."""

    def __init__(self, record: GroupRecord | None) -> None:
        self.record = record
        self.done = trio.Event()
        self.failed = False


class GroupStateWriter:
    """Writes a group's record unless the last record issued for it is the same.

    `write` returns once the group's current record is durable: after its own append, or
    after the identical append already in flight (re-issued if that one failed). A store
    failure is raised to the caller.
    """

    def __init__(
        self, store_group: Callable[[str, GroupRecord | None], Awaitable[None]]
    ) -> None:
        self._store_group = store_group
        self._issued: dict[str, _Issued] = {}

    def loaded(self, records: dict[str, GroupRecord]) -> None:
        """The records the store held at load: durable already."""
        for group_id, record in records.items():
            issued = self._issued[group_id] = _Issued(record)
            issued.done.set()

    async def settled(self, group_id: str) -> bool:
        """Wait for the last write issued for the group; True if what it wrote is durable,
        False if nothing was written or a write failed (the caller then writes the group)."""
        issued = self._issued.get(group_id)
        if issued is None or issued.record is _UNKNOWN:
            return False
        await issued.done.wait()
        return not issued.failed

    async def write(self, group_id: str, record: GroupRecord | None) -> None:
        while True:
            issued = self._issued.get(group_id)
            if issued is None and record is None:
                return  # never written: nothing to delete
            if issued is None or issued.record != record:
                break
            await issued.done.wait()
            if not issued.failed:
                return
            # the identical write failed: look again (it is issued anew below)
        mine = self._issued[group_id] = _Issued(record)
        try:
            await self._store_group(group_id, record)
        except BaseException:
            mine.failed = True
            if self._issued.get(group_id) is mine:
                unknown = self._issued[group_id] = _Issued(_UNKNOWN)
                unknown.done.set()
            raise
        finally:
            mine.done.set()
        if record is None and self._issued.get(group_id) is mine:
            del self._issued[group_id]


class DurableGroups:
    """The group coordinator's side of it (a mixin of `GroupCoordinator`): load the recorded
    groups, persist a group's current record, and the KIP-848 heartbeat that persists."""

    groups: dict[str, Group]
    consumer_groups: ConsumerGroupCoordinator
    _writer: GroupStateWriter

    def _load_groups(self, records: dict[str, GroupRecord]) -> None:
        """Groups as recorded; every member's session counts from now."""
        now = trio.current_time()
        readable: dict[str, GroupRecord] = {}
        for group_id, record in records.items():
            try:
                group = decode(group_id, record, now)
            except GroupRecordError as exc:
                log.warning("group %r not loaded (its members will rejoin): %s", group_id, exc)
                continue
            readable[group_id] = record
            if isinstance(group, Group):
                self.groups[group_id] = group
            else:
                self.consumer_groups.groups[group_id] = group
        self._writer.loaded(readable)
        if readable:
            log.info("groups loaded", extra={"groups": len(readable)})

    def _record_of(self, group_id: str) -> GroupRecord | None:
        group = self.groups.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            return encode_classic(group)
        consumer = self.consumer_groups.groups.get(group_id)
        if consumer is not None:
            return encode_consumer(consumer)
        return None

    async def _persist(self, group_id: str) -> None:
        """Make the group's current metadata durable (a no-op when it did not change)."""
        await self._writer.write(group_id, self._record_of(group_id))

    async def _persist_quietly(self, group_ids: list[str], why: str) -> None:
        """Persist after a background change; a failure is logged (the next answer retries)."""
        for group_id in group_ids:
            try:
                await self._persist(group_id)
            except Exception as exc:
                log.warning("group %r metadata not written after %s: %r", group_id, why, exc)

    async def consumer_group_heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        """A KIP-848 ConsumerGroupHeartbeat (`ConsumerGroupCoordinator.heartbeat`), answered
        once the epochs and assignment it reveals are durable."""
        group_id = kwargs["group_id"]
        before = consumer_fingerprint(self.consumer_groups.groups.get(group_id),
                                      kwargs["member_id"])
        try:
            answer = self.consumer_groups.heartbeat(**kwargs)
        except BaseException:
            await self._persist(group_id)
            raise
        after = consumer_fingerprint(self.consumer_groups.groups.get(group_id),
                                     answer["member_id"])
        # A heartbeat that changed nothing (most of them) needs no encoding of the group.
        if before is None or before != after or not await self._writer.settled(group_id):
            await self._persist(group_id)
        return answer
