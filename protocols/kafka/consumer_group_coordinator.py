"""KIP-848 consumer groups: ConsumerGroupHeartbeat membership with server-side assignment.

The broker, not a client leader, assigns partitions. Each group has a *group epoch*, bumped
whenever membership, subscriptions or the partition counts of subscribed topics change; the
*target assignment* is recomputed by the group's assignor (`assignors.py`) when the group epoch
moves past the *assignment epoch*. Every member then converges on its target one heartbeat at
a time (Kafka's "current assignment builder"):

  - partitions the member holds that its target no longer has are revoked first: the member
    keeps its epoch and is told its reduced assignment; it acknowledges by heartbeating with
    the reduced owned-partitions list (and must do so within its rebalance timeout, else it is
    fenced);
  - then it moves to the assignment epoch and receives the new partitions that are free — a
    partition still held (or being revoked) by another member is held back ("unreleased") and
    given on a later heartbeat, once its previous owner acknowledged revoking it. So no
    partition ever has two owners.

The server owns the heartbeat interval (5 s) and session timeout (45 s); a member silent for
the session timeout is removed. Static members (instance id) may leave with epoch -2, keeping
their assignment for the session timeout so that the restarted instance takes it over.

Committed offsets of these groups live in the classic coordinator's store; it asks this one to
check member epochs (OffsetCommit/OffsetFetch v9). This module must never do I/O or read the
clock other than Trio's: topic metadata arrives as an argument of every heartbeat.
"""

from __future__ import annotations

import enum
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from protocols.kafka.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, AssignorMember, TopicPartition
from protocols.kafka.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger("ledgerwire.kafka.consumer_groups")

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupError(KafkaProtocolError):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message, code=code)


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ConsumerGroupConfig:
    heartbeat_interval_s: float = 5.0  # group.consumer.heartbeat.interval.ms
    session_timeout_s: float = 45.0  # group.consumer.session.timeout.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: frozenset[str] = frozenset()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_s: float = 300.0
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()
    revoke_deadline: float | None = None
    last_heartbeat: float = 0.0
    left_temporarily: bool = False  # a static member that left with epoch -2


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    subscribed_partitions: dict[str, int] = field(default_factory=dict)  # topic -> count
    assignor_name: str = DEFAULT_ASSIGNOR

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch
            or m.pending_revocation
            or m.assigned != self.target.get(m.member_id, frozenset())
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def bump(self, reason: str) -> None:
        self.group_epoch += 1
        log.info(
            "consumer group epoch",
            extra={"group": self.group_id, "epoch": self.group_epoch, "reason": reason},
        )


def _matching_topics(member: ConsumerMember, topics: Mapping[str, Any]) -> set[str]:
    names = set(member.subscribed_topics) & set(topics)
    if member.subscribed_regex:
        pattern = re.compile(member.subscribed_regex)
        names.update(t for t in topics if pattern.fullmatch(t) and not t.startswith("__"))
    return names


class ConsumerGroupCoordinator:
    def __init__(
        self,
        config: ConsumerGroupConfig | None = None,
        claim_classic_group: Callable[[str], bool] | None = None,
    ) -> None:
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        # Asked before a new consumer group is created: False when a classic group with
        # members holds the id (the classic coordinator drops an empty one and says True).
        self._claim_classic_group = claim_classic_group or (lambda group_id: True)

    # ---- queries used by the classic coordinator and the handlers ------------------------------

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def drop_if_empty(self, group_id: str) -> None:
        """A classic member wants the id: fine if nobody uses it as a consumer group."""
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.members:
            raise ConsumerGroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        del self.groups[group_id]

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        return set(group.subscribed_partitions) if group is not None else set()

    def delete(self, group_id: str) -> None:
        if self.has_members(group_id):
            raise ConsumerGroupError(ErrorCode.NON_EMPTY_GROUP)
        self.groups.pop(group_id, None)

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        group = self.groups[group_id]
        if not member_id and member_epoch < 0:
            if group.members:  # an admin commit into a live group would race its members
                raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            return
        self._validate_member_epoch(group, member_id, member_epoch)

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id is None or member_epoch < 0:
            return
        self._validate_member_epoch(group, member_id, member_epoch)

    @staticmethod
    def _validate_member_epoch(group: ConsumerGroup, member_id: str, member_epoch: int) -> None:
        member = group.members.get(member_id)
        if member is None:
            raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if member_epoch != member.member_epoch:
            raise ConsumerGroupError(ErrorCode.STALE_MEMBER_EPOCH)

    # ---- the heartbeat -------------------------------------------------------------------------

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: frozenset[TopicPartition] | None,
        client_id: str,
        client_host: str,
        topics: Mapping[str, int],
    ) -> dict[str, Any]:
        """One ConsumerGroupHeartbeat. `topics` maps every topic name to its partition count.

        Answers {"member_id", "member_epoch", "heartbeat_interval_ms", "assignment"} where
        assignment is the member's partitions, or None when it has not changed.
        """
        if not group_id:
            raise ConsumerGroupError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty")
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            raise ConsumerGroupError(ErrorCode.UNSUPPORTED_ASSIGNOR, server_assignor)
        if subscribed_topic_regex is not None:
            try:
                re.compile(subscribed_topic_regex)
            except re.error as exc:
                raise ConsumerGroupError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from None
        now = trio.current_time()
        group = self.groups.get(group_id)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, member_id, member_epoch, instance_id)
        if group is None:
            if member_epoch != 0:
                raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if not self._claim_classic_group(group_id):
                # No online migration of a live classic group (Kafka's answer without it).
                raise ConsumerGroupError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
            group = self.groups[group_id] = ConsumerGroup(group_id)

        full_request = member_epoch == 0
        changes: list[str] = []  # one heartbeat bumps the group epoch at most once
        if member_epoch == 0:
            member = self._join(
                group, member_id, instance_id, rack_id, client_id, client_host, changes
            )
        else:
            known = group.members.get(member_id)
            if known is None:
                raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            self._check_epoch(known, member_epoch, owned)
            member = known
        member.last_heartbeat = now
        if rebalance_timeout_ms > 0:
            member.rebalance_timeout_s = rebalance_timeout_ms / 1000.0
        if subscribed_topic_names is not None:
            wanted = frozenset(subscribed_topic_names)
            if wanted != member.subscribed_topics:
                member.subscribed_topics = wanted
                changes.append("subscription changed")
        if (
            subscribed_topic_regex is not None
            and (subscribed_topic_regex or None) != member.subscribed_regex
        ):
            member.subscribed_regex = subscribed_topic_regex or None  # "" means no pattern
            changes.append("subscription pattern changed")
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor = server_assignor
            changes.append(f"assignor {server_assignor} asked for")
        if self._refresh_subscribed_partitions(group, topics):
            changes.append("subscribed topics changed")
        if changes:
            group.bump(f"member {member.member_id}: " + ", ".join(changes))
        if group.group_epoch != group.assignment_epoch:
            self._compute_target(group)
        before = member.assigned
        self._reconcile(group, member, owned, now)
        changed = member.assigned != before or full_request
        if owned is not None and owned != member.assigned:
            changed = True
        return {
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": int(self.config.heartbeat_interval_s * 1000),
            "assignment": member.assigned if changed else None,
        }

    def _join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        rack_id: str | None,
        client_id: str,
        client_host: str,
        changes: list[str],
    ) -> ConsumerMember:
        if instance_id is not None and instance_id in group.static_members:
            old = group.members[group.static_members[instance_id]]
            if not old.left_temporarily and old.member_id != member_id:
                raise ConsumerGroupError(ErrorCode.UNRELEASED_INSTANCE_ID)
            # The restarted instance takes over its predecessor's place and assignment.
            del group.members[old.member_id]
            kept_target = group.target.pop(old.member_id, None)
            new_id = member_id or str(uuid.uuid4())
            old.member_id, old.left_temporarily = new_id, False
            old.client_id, old.client_host, old.rack_id = client_id, client_host, rack_id
            group.members[new_id] = old
            group.static_members[instance_id] = new_id
            if kept_target is not None:
                group.target[new_id] = kept_target
            return old
        if member_id and member_id in group.members:
            # A member rejoining with epoch 0 gave up what it had: start it afresh.
            self._remove(group, member_id, "member rejoined")
        if len(group.members) >= self.config.max_size:
            raise ConsumerGroupError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        member = ConsumerMember(
            member_id or str(uuid.uuid4()), instance_id, rack_id, client_id, client_host
        )
        group.members[member.member_id] = member
        if instance_id is not None:
            group.static_members[instance_id] = member.member_id
        changes.append("joined")
        return member

    @staticmethod
    def _check_epoch(
        member: ConsumerMember, epoch: int, owned: frozenset[TopicPartition] | None
    ) -> None:
        if epoch > member.member_epoch:
            raise ConsumerGroupError(ErrorCode.FENCED_MEMBER_EPOCH)
        if epoch < member.member_epoch:
            # The answer that moved it to its current epoch may have been lost: accept the
            # previous epoch if what it owns is still within its assignment.
            if epoch != member.previous_epoch or (
                owned is not None and not owned <= member.assigned
            ):
                raise ConsumerGroupError(ErrorCode.FENCED_MEMBER_EPOCH)

    def _leave(
        self, group: ConsumerGroup | None, member_id: str, epoch: int, instance_id: str | None
    ) -> dict[str, Any]:
        if group is None or member_id not in group.members:
            raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members[member_id]
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.left_temporarily = True
        else:
            self._remove(group, member_id, "member left")
        return {
            "member_id": member_id,
            "member_epoch": epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    def _remove(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if (
            member.instance_id is not None
            and group.static_members.get(member.instance_id) == member_id
        ):
            del group.static_members[member.instance_id]
        group.target.pop(member_id, None)
        group.bump(f"{reason}: {member_id}")

    def _refresh_subscribed_partitions(
        self, group: ConsumerGroup, topics: Mapping[str, int]
    ) -> bool:
        subscribed: dict[str, int] = {}
        for member in group.members.values():
            for name in _matching_topics(member, topics):
                subscribed[name] = topics[name]
        if subscribed == group.subscribed_partitions:
            return False
        group.subscribed_partitions = subscribed
        return True

    def _compute_target(self, group: ConsumerGroup) -> None:
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        group.assignor_name = (
            max(sorted(votes), key=lambda n: votes[n]) if votes else DEFAULT_ASSIGNOR
        )
        members = [
            AssignorMember(
                m.member_id,
                frozenset(_matching_topics(m, group.subscribed_partitions)),
                m.assigned | m.pending_revocation,
            )
            for m in group.members.values()
        ]
        target = ASSIGNORS[group.assignor_name](members, group.subscribed_partitions)
        group.target = {mid: frozenset(tps) for mid, tps in target.items()}
        group.assignment_epoch = group.group_epoch

    def _reconcile(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        owned: frozenset[TopicPartition] | None,
        now: float,
    ) -> None:
        target = group.target.get(member.member_id, frozenset())
        if member.pending_revocation:
            if owned is None or owned & member.pending_revocation:
                member.assigned &= target  # still revoking; a newer target may take more
                return
            member.pending_revocation = frozenset()
            member.revoke_deadline = None
        to_revoke = member.assigned - target
        if to_revoke:
            member.assigned -= to_revoke
            member.pending_revocation = to_revoke
            member.revoke_deadline = now + member.rebalance_timeout_s
            return
        held_elsewhere: set[TopicPartition] = set()
        for other in group.members.values():
            if other is not member:
                held_elsewhere |= other.assigned | other.pending_revocation
        member.assigned = frozenset(tp for tp in target if tp not in held_elsewhere)
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch

    # ---- timers ------------------------------------------------------------------------------

    def next_deadline(self) -> float:
        """The earliest session end or revocation deadline of any member (inf when none)."""
        deadlines = [float("inf")]
        for group in self.groups.values():
            for member in group.members.values():
                deadlines.append(member.last_heartbeat + self.config.session_timeout_s)
                if member.revoke_deadline is not None:
                    deadlines.append(member.revoke_deadline)
        return min(deadlines)

    def expire(self, now: float) -> list[str]:
        """Remove members whose session ran out or who did not revoke within their timeout;
        the ids of the groups that changed."""
        changed = []
        for group in list(self.groups.values()):
            epoch = group.group_epoch
            for member in list(group.members.values()):
                if now - member.last_heartbeat >= self.config.session_timeout_s:
                    self._remove(group, member.member_id, "session expired")
                elif member.revoke_deadline is not None and now > member.revoke_deadline:
                    self._remove(group, member.member_id, "revocation timed out")
            if group.group_epoch != epoch:
                changed.append(group.group_id)
        return changed

    def described(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)
