"""The classic consumer-group coordinator: membership, rebalances and committed offsets.

One `Group` per group id, driven through one explicit state machine (`ALLOWED_TRANSITIONS`):

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    CompletingRebalance | Stable --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --every member gone--> Empty;  any --delete--> Dead

A rebalance finishes when every known member has rejoined or when the longest rebalance
timeout of its members runs out (members that did not rejoin are dropped); a group that was
Empty first waits `initial_rebalance_delay_s` so a fleet starting together lands in one
generation. A static member (group.instance.id) that comes back with no member id takes
over its old incarnation's place (fencing it); in a Stable group with unchanged protocols it
gets the current generation and assignment back, no rebalance (KIP-345). Members may commit
with the current generation while a rebalance is prepared, not between JoinGroup and
SyncGroup. Sessions expire in a background task at each member's own deadline (not on a
coarse tick), and a group whose last member leaves or expires is Empty at once. Waits are
Trio events; the coordinator runs its timers in the nursery given to `run()`.

The data (states, members, groups, offsets) lives in `group_model.py`; KIP-848 groups in
`consumer_group_coordinator.py`, which this coordinator holds as `consumer_groups` (one
group-id namespace, one offset store); committed offsets in `group_offsets.py` and rebalances
in `group_rebalance.py` (mixins of the coordinator). Committed offsets are kept in memory for
reads and written through an `OffsetStoreApi` (the gateway backs it by a ledger) before a
commit is acknowledged; those of groups that stay empty past the retention period expire.
Group metadata (members, generations, assignments; KIP-848 epochs) is durable too: written
through the same store before an answer reveals it and loaded in `run()` (`group_records.py`
says what, when and how), so a restart or a coordinator move does not end anyone's membership.
This module must never do I/O of its own: storage goes through the offset store it is given.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio

from protocols.kafka.consumer_group_coordinator import (
    ConsumerGroupCoordinator,
    ConsumerGroupError,
)
from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_model import (
    ALLOWED_TRANSITIONS,
    CommittedOffset,
    CoordinatorConfig,
    Group,
    GroupError,
    GroupState,
    Member,
    OffsetKey,
    OffsetStoreApi,
    wall_clock_ms,
)
from protocols.kafka.group_offsets import CommittedOffsets
from protocols.kafka.group_rebalance import Rebalances
from protocols.kafka.group_records import DurableGroups, GroupStateWriter

log = logging.getLogger("ledgerwire.kafka.groups")


class GroupCoordinator(CommittedOffsets, DurableGroups, Rebalances):
    def __init__(self, offset_store: OffsetStoreApi, config: CoordinatorConfig | None = None):
        self.config = config or CoordinatorConfig()
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[OffsetKey, CommittedOffset]] = {}
        self._store = offset_store
        self._writer = GroupStateWriter(offset_store.store_group)
        self._nursery: trio.Nursery | None = None
        # KIP-848 groups share the group-id namespace and the committed offsets.
        self.consumer_groups = ConsumerGroupCoordinator(
            self.config.consumer_groups, self._release_classic_group
        )

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Load committed offsets and groups, then run the coordinator's timers until cancelled."""
        self.offsets = await self._store.load()
        self._load_groups(await self._store.load_groups())
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for group in self.groups.values():
                if group.state is GroupState.PREPARING_REBALANCE:
                    # Recorded mid-rebalance: it completes as any other (members rejoin).
                    group.rebalance_running = True
                    nursery.start_soon(self._complete_rebalance_when_ready, group, False)
            nursery.start_soon(self._expire_sessions)
            nursery.start_soon(self._expire_offsets_periodically)
            task_status.started()

    def _release_classic_group(self, group_id: str) -> bool:
        """A KIP-848 group wants the id: granted unless a classic group with members has it."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return True
        if group.members:
            return False
        group.transition(GroupState.DEAD)
        del self.groups[group_id]
        return True

    # ---- membership -------------------------------------------------------------------------

    def _group(self, group_id: str, *, create: bool) -> Group:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if not create:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = Group(group_id)
        return group

    async def join(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
        reason: str | None = None,
    ) -> dict[str, Any]:
        if not group_id:
            raise GroupError(ErrorCode.INVALID_GROUP_ID)
        session_s = session_timeout_ms / 1000.0
        if not self.config.min_session_timeout_s <= session_s <= self.config.max_session_timeout_s:
            raise GroupError(ErrorCode.INVALID_SESSION_TIMEOUT)
        if not protocols:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        try:
            self.consumer_groups.drop_if_empty(group_id)
        except ConsumerGroupError as exc:
            raise GroupError(exc.code, "the group uses the consumer (KIP-848) protocol") from None
        group = self._group(group_id, create=True)
        if group.members and group.protocol_type not in (None, protocol_type):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.members and not self._supports_common_protocol(group, protocols):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

        if not member_id:
            if group_instance_id is not None and group_instance_id in group.static_members:
                rejoined = self._replace_static_member(group, group_instance_id, protocols)
                if rejoined is not None:
                    await self._persist(group_id)  # the new member id must survive a restart
                    return rejoined
                member_id = group.static_members[group_instance_id]
            else:
                member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
                if require_known_member_id and group_instance_id is None:
                    group.pending_member_ids.add(member_id)
                    return {"error_code": int(ErrorCode.MEMBER_ID_REQUIRED),
                            "member_id": member_id, "generation_id": -1}
        elif member_id not in group.members and member_id not in group.pending_member_ids:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        elif (
            group_instance_id is not None
            and group.static_members.get(group_instance_id, member_id) != member_id
        ):
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)

        group.pending_member_ids.discard(member_id)
        member = group.members.get(member_id)
        if member is None:
            member = Member(
                member_id, group_instance_id, client_id, client_host, session_s,
                (rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms) / 1000.0,
                protocol_type, protocols,
            )
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
        elif (
            group.state is GroupState.STABLE
            and member.protocols == protocols
            and member_id != group.leader_id
        ):
            # A follower rejoining with nothing new: hand back the current generation.
            member.last_heartbeat = trio.current_time()
            answer = self._join_answer(group, member)
            await self._persist(group_id)
            return answer
        member.protocols = protocols
        member.session_timeout_s = session_s
        member.last_heartbeat = trio.current_time()
        member.joining = True
        member.join_result = None
        group.protocol_type = protocol_type
        self._prepare_rebalance(
            group, f"member {member_id} joined" + (f" ({reason})" if reason else ""))
        group.wake()

        while member.join_result is None:
            await group.changed.wait()
        # The generation, leader and members are revealed only once durable (one write for
        # all the members answered together: the writer skips a record already issued).
        result = member.join_result
        await self._persist(group_id)
        return result

    def _replace_static_member(
        self, group: Group, instance_id: str, protocols: list[tuple[str, bytes]]
    ) -> dict[str, Any] | None:
        """A static member came back with no member id: give it a new id that fences the old.

        The member keeps its place and assignment. In a Stable group where its protocols are
        unchanged (so the group's protocol stays the same) it gets the current generation back
        and nothing is rebalanced — the point of static membership (KIP-345). A returning
        leader is told to skip computing an assignment (KIP-814). Otherwise returns None and
        the caller runs the ordinary join under the new id.
        """
        old_id = group.static_members[instance_id]
        member = group.members.pop(old_id)
        if member.joining and member.join_result is None:
            # The old incarnation still waits on a JoinGroup: it is fenced.
            member.join_result = {"error_code": int(ErrorCode.FENCED_INSTANCE_ID)}
            member.joining = False
        new_id = f"{instance_id}-{uuid.uuid4()}"
        member.member_id = new_id
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        member.last_heartbeat = trio.current_time()
        log.info("static member rejoined",
                 extra={"group": group.group_id, "instance": instance_id, "member": new_id})
        if group.state is GroupState.STABLE and member.protocols == protocols:
            answer = self._join_answer(group, member)
            answer["skip_assignment"] = new_id == group.leader_id
            return answer
        return None

    def _supports_common_protocol(self, group: Group, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in group.members.values())

    @staticmethod
    def _check_instance(group: Group, member_id: str, instance_id: str | None) -> None:
        """A request naming a static instance must come from its current incarnation."""
        if instance_id is None:
            return
        current = group.static_members.get(instance_id)
        if current is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if current != member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)

    def _check_member(
        self, group: Group, member_id: str, generation_id: int, instance_id: str | None = None
    ) -> Member:
        self._check_instance(group, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        return member

    async def sync(
        self, *, group_id: str, member_id: str, generation_id: int,
        assignments: list[tuple[str, bytes]], group_instance_id: str | None = None,
        protocol_type: str | None = None, protocol_name: str | None = None,
    ) -> tuple[str | None, str | None, bytes]:
        group = self._group(group_id, create=False)
        member = self._check_member(group, member_id, generation_id, group_instance_id)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.COMPLETING_REBALANCE:
            if member_id == group.leader_id:
                given = dict(assignments)
                for mid, m in group.members.items():
                    m.assignment = given.get(mid, b"")
                group.transition(GroupState.STABLE)
            generation = group.generation_id
            while group.state is GroupState.COMPLETING_REBALANCE:
                await group.changed.wait()
            if group.state is not GroupState.STABLE or group.generation_id != generation:
                raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
            if member_id not in group.members:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        member.last_heartbeat = trio.current_time()
        answer = group.protocol_type, group.protocol_name, member.assignment
        await self._persist(group_id)  # the assignment is revealed only once durable
        return answer

    def heartbeat(
        self, *, group_id: str, member_id: str, generation_id: int,
        group_instance_id: str | None = None,
    ) -> None:
        group = self._group(group_id, create=False)
        self._check_instance(group, member_id, group_instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        member.last_heartbeat = trio.current_time()
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        if generation_id != group.generation_id:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """Remove members (member id, or instance id for static members); per-member codes."""
        group = self.groups.get(group_id)
        if group is None:
            return [int(ErrorCode.UNKNOWN_MEMBER_ID)] * len(members)
        codes = []
        for member_id, instance_id in members:
            if instance_id is not None:
                current = group.static_members.get(instance_id)
                if current is not None and member_id and member_id != current:
                    codes.append(int(ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = current or ""
            if member_id in group.members:
                self._remove_member(group, member_id)
                codes.append(0)
            else:
                codes.append(int(ErrorCode.UNKNOWN_MEMBER_ID))
        if any(code == 0 for code in codes):
            self._after_membership_change(group, "members left")
            await self._persist(group_id)
        return codes

    def _next_session_deadline(self) -> float:
        """The earliest moment a member's session (classic or KIP-848) can run out."""
        deadlines = [m.last_heartbeat + m.session_timeout_s
                     for group in self.groups.values() for m in group.members.values()
                     if not m.joining]
        deadlines.append(self.consumer_groups.next_deadline())
        return min(deadlines)

    async def _expire_sessions(self) -> None:
        """Expire each member at its own deadline (to the scheduler's precision), waking at
        least every `expiry_check_interval_s` for members that joined since: a new member's
        session is never shorter than the minimum session timeout, far above that interval."""
        while True:
            now = trio.current_time()
            await trio.sleep_until(min(self._next_session_deadline(),
                                       now + self.config.expiry_check_interval_s))
            now = trio.current_time()
            changed: list[str] = []
            for group in list(self.groups.values()):
                expired = [
                    m.member_id
                    for m in group.members.values()
                    if not m.joining and now - m.last_heartbeat >= m.session_timeout_s
                ]
                for member_id in expired:
                    log.info("session expired",
                             extra={"group": group.group_id, "member": member_id})
                    self._remove_member(group, member_id)
                if expired:
                    self._after_membership_change(group, "session expired")
                    changed.append(group.group_id)
            changed.extend(self.consumer_groups.expire(now))
            await self._persist_quietly(changed, "session expiry")

    # ---- admin ------------------------------------------------------------------------------

    def known_group_ids(self) -> list[str]:
        ids = {g for g, grp in self.groups.items() if grp.state is not GroupState.DEAD}
        ids.update(self.consumer_groups.groups)
        ids.update(g for g, offsets in self.offsets.items() if offsets)
        return sorted(ids)

    def describe(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and self.offsets.get(group_id):
            return Group(group_id)
        return group

    async def delete_group(self, group_id: str) -> None:
        if self.consumer_groups.owns(group_id):
            if self.consumer_groups.has_members(group_id):
                raise GroupError(ErrorCode.NON_EMPTY_GROUP)
            self.consumer_groups.delete(group_id)
            await self._persist(group_id)
            await self._store.delete(group_id, None)
            self.offsets.pop(group_id, None)
            return
        group = self.groups.get(group_id)
        if group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD):
            raise GroupError(ErrorCode.NON_EMPTY_GROUP)
        if group is None and not self.offsets.get(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
        await self._store.delete(group_id, None)
        self.offsets.pop(group_id, None)
        if group is not None:
            group.transition(GroupState.DEAD)
            del self.groups[group_id]
            await self._persist(group_id)


__all__ = [
    "ALLOWED_TRANSITIONS", "CommittedOffset", "CoordinatorConfig", "Group", "GroupCoordinator",
    "GroupError", "GroupState", "Member", "OffsetKey", "OffsetStoreApi", "wall_clock_ms",
]
