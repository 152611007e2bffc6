"""Rebalances of the classic group coordinator: preparing one (a join, a leave, an expiry),
completing it once every member rejoined or the longest rebalance timeout ran out (members
that did not rejoin are dropped; a group that was Empty first waits
`initial_rebalance_delay_s`), choosing the group's protocol and the answers each member's
JoinGroup gets.

A mixin of `GroupCoordinator` (it uses the coordinator's config, its nursery for the
completing task, and DurableGroups' persisting). This module must never do I/O of its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_model import CoordinatorConfig, Group, GroupState, Member

log = logging.getLogger("ledgerwire.kafka.groups")


class Rebalances:
    config: CoordinatorConfig
    _nursery: trio.Nursery | None

    if TYPE_CHECKING:

        async def _persist_quietly(self, group_ids: list[str], why: str) -> None: ...

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            initial = group.state is GroupState.EMPTY
            group.transition(GroupState.PREPARING_REBALANCE)
            log.info("rebalance", extra={"group": group.group_id, "reason": reason})
            if not group.rebalance_running and self._nursery is not None:
                group.rebalance_running = True
                self._nursery.start_soon(self._complete_rebalance_when_ready, group, initial)

    async def _complete_rebalance_when_ready(self, group: Group, initial: bool) -> None:
        try:
            now = trio.current_time()
            deadline = now + group.rebalance_timeout_s()
            if initial:
                # Let a fleet starting together join one generation: wait while joins arrive.
                delay_end = min(now + self.config.initial_rebalance_delay_s, deadline)
                while trio.current_time() < delay_end:
                    with trio.move_on_at(delay_end):
                        await group.changed.wait()
            while not group.all_members_joined() and trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    await group.changed.wait()
        finally:
            group.rebalance_running = False
        if group.state is GroupState.PREPARING_REBALANCE:
            self._complete_join(group)
            if group.state is GroupState.EMPTY:  # nobody waits for an answer: record it here
                await self._persist_quietly([group.group_id], "a rebalance emptied the group")

    def _complete_join(self, group: Group) -> None:
        for member_id in [m.member_id for m in group.members.values() if not m.joining]:
            self._remove_member(group, member_id)
        if not group.members:
            group.generation_id += 1
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY)
            return
        group.generation_id += 1
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        for member in group.members.values():
            member.assignment = b""
        group.transition(GroupState.COMPLETING_REBALANCE)
        for member in group.members.values():
            member.joining = False
            member.last_heartbeat = trio.current_time()
            member.join_result = self._join_answer(group, member)
        group.wake()

    def _join_answer(self, group: Group, member: Member) -> dict[str, Any]:
        is_leader = member.member_id == group.leader_id
        return {
            "error_code": 0,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "member_id": member.member_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(group.protocol_name or "")}
                for m in group.members.values()
            ]
            if is_leader
            else [],
        }

    @staticmethod
    def _select_protocol(group: Group) -> str:
        common = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
        votes: dict[str, int] = {}
        for member in group.members.values():
            choice = next(name for name, _ in member.protocols if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        if member.joining and member.join_result is None:
            member.join_result = {"error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}
        group.wake()

    def _after_membership_change(self, group: Group, reason: str) -> None:
        if not group.members and group.state is not GroupState.EMPTY:
            # Nobody left to wait for: the group is Empty now, not after a timer's tick, so a
            # DeleteGroups right after the last member left or expired succeeds (as in Kafka,
            # whose delayed join completes at once when every remaining member has joined).
            if group.state is not GroupState.PREPARING_REBALANCE:
                group.transition(GroupState.PREPARING_REBALANCE)
            self._complete_join(group)
            group.wake()
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            group.wake()
        elif group.members:
            self._prepare_rebalance(group, reason)
        elif group.state is not GroupState.EMPTY:
            self._prepare_rebalance(group, reason)
