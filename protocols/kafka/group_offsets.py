"""Committed offsets of the group coordinator: commit (with Kafka's membership checks),
transactional apply, fetch, OffsetDelete's rules and the retention of empty groups' offsets.

A mixin of `GroupCoordinator` (it uses the coordinator's groups, KIP-848 groups, offsets map
and offset store). A commit is applied in memory only after the offset store made it durable.
This module must never do I/O of its own.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from protocols.kafka.consumer_group_coordinator import ConsumerGroupCoordinator
from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_model import (
    CommittedOffset,
    CoordinatorConfig,
    Group,
    GroupError,
    GroupState,
    Member,
    OffsetKey,
    OffsetStoreApi,
)

log = logging.getLogger("ledgerwire.kafka.groups")


class CommittedOffsets:
    config: CoordinatorConfig
    groups: dict[str, Group]
    offsets: dict[str, dict[OffsetKey, CommittedOffset]]
    consumer_groups: ConsumerGroupCoordinator
    _store: OffsetStoreApi

    if TYPE_CHECKING:

        def _check_member(
            self, group: Group, member_id: str, generation_id: int,
            instance_id: str | None = None,
        ) -> Member: ...

        async def _persist(self, group_id: str) -> None: ...

    async def _expire_offsets_periodically(self) -> None:
        while True:
            await trio.sleep(self.config.offsets_retention_check_interval_s)
            await self.expire_offsets()

    async def expire_offsets(self) -> list[str]:
        """Drop the committed offsets of groups that stayed empty for the retention period.

        As Kafka (KIP-211): the clock starts when the group became Empty, or — for a group
        never seen since start-up, or one only ever used for admin commits — at its latest
        commit. Groups with members keep their offsets. Returns the groups expired.
        """
        now_ms = self.config.wall_clock_ms()
        retention_ms = self.config.offsets_retention_s * 1000.0
        expired = []
        for group_id, committed in list(self.offsets.items()):
            if not committed or self.consumer_groups.has_members(group_id):
                continue
            group = self.groups.get(group_id)
            if group is not None and group.members:
                continue
            latest_commit = max(o.commit_timestamp_ms for o in committed.values())
            since = max(group.state_since_ms, latest_commit) if group is not None else latest_commit
            if now_ms - since >= retention_ms:
                await self._store.delete(group_id, None)
                self.offsets.pop(group_id, None)
                expired.append(group_id)
                # An empty group whose offsets are gone is gone too (Kafka: Empty -> Dead).
                self.consumer_groups.delete(group_id)
                group = self.groups.get(group_id)
                if group is not None and group.state is GroupState.EMPTY and not group.members:
                    group.transition(GroupState.DEAD)
                    del self.groups[group_id]
                await self._persist(group_id)  # a tombstone if the group is gone
        if expired:
            log.info("committed offsets expired", extra={"groups": expired})
        return expired

    # ---- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self, *, group_id: str, member_id: str, generation_id: int,
        offsets: Mapping[OffsetKey, CommittedOffset], group_instance_id: str | None = None,
    ) -> None:
        """Commit after Kafka's checks: a member commits with its current generation (also
        while the group prepares a rebalance, so an eager consumer can commit what it is about
        to give up), but not between JoinGroup and SyncGroup; a generation of -1 with no
        member id is an admin commit, allowed only while the group has no members. A KIP-848
        group checks the member epoch instead (`ConsumerGroupCoordinator`)."""
        if self.consumer_groups.owns(group_id):
            self.consumer_groups.validate_offset_commit(group_id, member_id, generation_id)
            await self._store.commit(group_id, offsets)
            self.offsets.setdefault(group_id, {}).update(offsets)
            return
        group = self.groups.get(group_id)
        if generation_id >= 0 or member_id:
            if group is None or not group.members:
                if generation_id >= 0:
                    raise GroupError(ErrorCode.ILLEGAL_GENERATION)
            else:
                self._check_member(group, member_id, generation_id, group_instance_id)
                if group.state is GroupState.COMPLETING_REBALANCE:
                    raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        elif group is not None and group.members:
            # A simple (assign-only) commit into a group that has live members is refused.
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        await self._store.commit(group_id, offsets)
        self.offsets.setdefault(group_id, {}).update(offsets)

    async def apply_transactional_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        """Make offsets committed inside a transaction visible, when the transaction commits.

        Membership was checked when the offsets were sent (TxnOffsetCommit); the commit marker
        applies them whatever the group did since, as Kafka does.
        """
        await self._store.commit(group_id, offsets)
        self.offsets.setdefault(group_id, {}).update(offsets)

    async def advance_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        """Move committed offsets forward only (TTL, backlog eviction), whatever the members do.

        A key already at or past its new offset is left alone, checked before the write and
        again after it: a client commit that lands meanwhile must win both in memory and as the
        last record of the offsets log (it is written again if ours went after it)."""
        current = self.offsets.get(group_id, {})
        forward = {k: v for k, v in offsets.items()
                   if k not in current or v.offset > current[k].offset}
        if not forward:
            return
        await self._store.commit(group_id, forward)
        current = self.offsets.setdefault(group_id, {})
        overtaken: dict[OffsetKey, CommittedOffset] = {}
        for key, moved in forward.items():
            now = current.get(key)
            if now is not None and now.offset >= moved.offset:
                overtaken[key] = now
            else:
                current[key] = moved
        if overtaken:
            await self._store.commit(group_id, overtaken)

    def fetch_offsets(
        self, group_id: str, keys: list[OffsetKey] | None
    ) -> dict[OffsetKey, CommittedOffset]:
        committed = self.offsets.get(group_id, {})
        if keys is None:
            return dict(committed)
        return {k: committed[k] for k in keys if k in committed}

    def offset_delete_refusals(self, group_id: str, keys: list[OffsetKey]) -> dict[OffsetKey, int]:
        """OffsetDelete's per-partition refusals, as Kafka: a group with members keeps the
        offsets of topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC); a non-empty group of
        another protocol type refuses everything (NON_EMPTY_GROUP); an unknown group is
        GROUP_ID_NOT_FOUND (raised)."""
        if self.consumer_groups.has_members(group_id):
            subscribed = self.consumer_groups.subscribed_topics(group_id)
            code = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            return {k: code for k in keys if k[0] in subscribed}
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if not self.offsets.get(group_id) and not self.consumer_groups.owns(group_id):
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
            return {}
        if group.state is GroupState.EMPTY:
            return {}
        if group.protocol_type != "consumer":
            return {k: int(ErrorCode.NON_EMPTY_GROUP) for k in keys}
        subscribed = set()
        for member in group.members.values():
            subscribed |= subscribed_topics(member.metadata_for(group.protocol_name or ""))
        code = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
        return {k: code for k in keys if k[0] in subscribed}

    async def forget_topic(self, topic: str) -> int:
        """Delete every group's committed offsets of a deleted topic, members or not, as Kafka
        does when a topic is deleted (the coordinator drops the deleted partitions' offsets):
        a topic created again under the name is read from auto.offset.reset, not from the old
        topic's positions, and a churn of topics leaves no offsets behind.  Returns how many
        offsets were deleted."""
        deleted = 0
        for group_id, committed in list(self.offsets.items()):
            keys = [k for k in committed if k[0] == topic]
            if not keys:
                continue
            await self._store.delete(group_id, keys)
            for key in keys:
                committed.pop(key, None)
            deleted += len(keys)
        return deleted

    async def delete_offsets(self, group_id: str, keys: list[OffsetKey]) -> None:
        """Delete the given offsets, except those `offset_delete_refusals` refuses."""
        refused = self.offset_delete_refusals(group_id, keys)
        keys = [k for k in keys if k not in refused]
        if not keys:
            return
        await self._store.delete(group_id, keys)
        committed = self.offsets.get(group_id, {})
        for key in keys:
            committed.pop(key, None)


def subscribed_topics(subscription: bytes) -> set[str]:
    """The topics of a consumer-protocol Subscription (JoinGroup member metadata): int16
    version, then an array of int16-length topic names. Unreadable metadata names none."""
    try:
        count = struct.unpack_from(">i", subscription, 2)[0]
        topics, position = set(), 6
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", subscription, position)
            position += 2
            if length < 0 or position + length > len(subscription):
                return set()
            topics.add(subscription[position:position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
