"""KIP-932 share groups: ShareGroupHeartbeat membership and the share assignment.

A share group has members (each names itself with a UUID it keeps for its lifetime) and a
*group epoch*, bumped when membership or subscriptions or partition counts change.  There is no
exclusive ownership, so no revocation round: on every heartbeat a member moves straight to the
group epoch and is told its target assignment.  The assignment spreads the subscribed
partitions over the members round-robin, and when members outnumber a topic's partitions the
partitions are shared (each member gets at least one); the per-record delivery engine makes
sharing safe.

A member silent for the session timeout is removed (`expire`), and `on_leave` is told of every
member that left or expired so the broker can release the records it holds.  Membership is
kept in memory: a member whose broker restarted gets UNKNOWN_MEMBER_ID and joins again, as the
Java client does.

This module must never do I/O or read a clock: the time arrives as an argument.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from protocols.kafka.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger("ledgerwire.kafka.share_groups")

LEAVE_EPOCH = -1
TopicPartition = tuple[str, int]


class ShareGroupError(KafkaProtocolError):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message, code=code)


@dataclass(frozen=True)
class ShareGroupConfig:
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    max_size: int = 200  # group.share.max.size


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    subscribed_topics: frozenset[str] = frozenset()
    member_epoch: int = 0
    assigned: frozenset[TopicPartition] = frozenset()
    last_heartbeat_ms: float = 0.0


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    assignment_epoch: int = 0

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if any(m.member_epoch != self.group_epoch for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics}


def share_assignment(
    members: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int]
) -> dict[str, frozenset[TopicPartition]]:
    """Every subscribed partition to some member; partitions shared when members outnumber
    them, so that every subscriber of a topic reads some partition of it."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic in sorted({t for topics in members.values() for t in topics}):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        count = partition_counts.get(topic, 0)
        if not subscribers or count <= 0:
            continue
        for p in range(max(count, len(subscribers))):
            out[subscribers[p % len(subscribers)]].add((topic, p % count))
    return {m: frozenset(tps) for m, tps in out.items()}


class ShareGroupCoordinator:
    """Share groups' membership (see the module docstring)."""

    def __init__(
        self,
        config: ShareGroupConfig | None = None,
        on_leave: Callable[[str, str], None] | None = None,
    ) -> None:
        self.config = config or ShareGroupConfig()
        self.groups: dict[str, ShareGroup] = {}
        self._on_leave = on_leave or (lambda _group, _member: None)

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: list[str] | None,
        client_id: str,
        client_host: str,
        topics: Mapping[str, int],
        now_ms: float,
    ) -> tuple[ShareMember | None, int]:
        """One heartbeat: (the member after it, or None when it left; the group epoch)."""
        if not group_id:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                self._remove(group, member_id, "left")
            return None, group.group_epoch if group is not None else 0
        if member_epoch < 0:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, f"bad member epoch {member_epoch}")
        if group is None:
            if member_epoch != 0:
                raise ShareGroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None:
            if member_epoch != 0:
                raise ShareGroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
            if len(group.members) >= self.config.max_size:
                raise ShareGroupError(ErrorCode.GROUP_MAX_SIZE_REACHED, "share group is full")
            if subscribed_topic_names is None:
                raise ShareGroupError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames is needed "
                                      "to join")
            member = group.members[member_id] = ShareMember(member_id, client_id, client_host)
            group.group_epoch += 1
            log.info("share group member joined",
                     extra={"group": group_id, "member": member_id, "epoch": group.group_epoch})
        elif member_epoch not in (member.member_epoch, 0):
            raise ShareGroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"member epoch {member_epoch} is not {member.member_epoch}")
        member.last_heartbeat_ms = now_ms
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_topic_names is not None:
            wanted = frozenset(subscribed_topic_names)
            if wanted != member.subscribed_topics:
                member.subscribed_topics = wanted
                group.group_epoch += 1
        counts = {t: topics[t] for t in group.subscribed_topics() if t in topics}
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.group_epoch += 1
        if group.assignment_epoch != group.group_epoch:
            group.target = share_assignment(
                {m.member_id: m.subscribed_topics for m in group.members.values()}, counts
            )
            group.assignment_epoch = group.group_epoch
        member.assigned = group.target.get(member_id, frozenset())
        member.member_epoch = group.group_epoch
        return member, group.group_epoch

    def _remove(self, group: ShareGroup, member_id: str, reason: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        log.info("share group member removed",
                 extra={"group": group.group_id, "member": member_id, "reason": reason})
        self._on_leave(group.group_id, member_id)

    def expire(self, now_ms: float) -> None:
        """Remove members silent for longer than the session timeout."""
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if now_ms - member.last_heartbeat_ms > self.config.session_timeout_ms:
                    self._remove(group, member.member_id, "session timeout")

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def delete(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise ShareGroupError(ErrorCode.NON_EMPTY_GROUP, f"share group {group_id} has members")
        self.groups.pop(group_id, None)

    def ensure(self, group_id: str) -> ShareGroup:
        """The group, created empty if unknown (a group that has only persisted state)."""
        return self.groups.setdefault(group_id, ShareGroup(group_id))
