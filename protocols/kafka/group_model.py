"""The classic consumer group's data: states and their allowed transitions, members, groups,
committed offsets, the offset-store interface and the coordinator's settings.

Plain data plus the state-transition check; the coordinator (`group_coordinator.py`) drives
it. This module must never do I/O or run tasks.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from protocols.kafka.consumer_group_coordinator import ConsumerGroupConfig
from protocols.kafka.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger("ledgerwire.kafka.groups")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


ALLOWED_TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


class GroupError(KafkaProtocolError):
    """A group request refused with a wire error code (the handler answers with it)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message, code=code)


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1


OffsetKey = tuple[str, int]  # (topic, partition)


class OffsetStoreApi(Protocol):
    """Durable committed offsets and group metadata
    (gateway.coordinator.offset_store.LedgerOffsetStore).

    `load_groups` (called after `load`) gives the latest group record per group id;
    `store_group` makes a group's record (None: the group is gone) durable before it returns
    (see `group_records.py` for the records)."""

    async def load(self) -> dict[str, dict[OffsetKey, CommittedOffset]]: ...

    async def load_groups(self) -> dict[str, dict[str, Any]]: ...

    async def store_group(self, group_id: str, record: dict[str, Any] | None) -> None: ...

    async def commit(self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]) -> None: ...

    async def delete(self, group_id: str, keys: list[OffsetKey] | None) -> None: ...


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = 0.0
    joining: bool = False  # has a JoinGroup waiting for this rebalance to finish
    join_result: dict[str, Any] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_member_ids: set[str] = field(default_factory=set)  # handed out, not yet joined
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    changed: trio.Event = field(default_factory=trio.Event)
    rebalance_running: bool = False
    state_since_ms: int = field(default_factory=wall_clock_ms)  # wall clock of the last transition

    def transition(self, new: GroupState) -> None:
        if new not in ALLOWED_TRANSITIONS[self.state]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {new.value}")
        log.info(
            "group state",
            extra={
                "group": self.group_id,
                "from": self.state.value,
                "to": new.value,
                "generation": self.generation_id,
            },
        )
        self.state = new
        self.state_since_ms = wall_clock_ms()
        self.wake()

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def all_members_joined(self) -> bool:
        return all(m.joining for m in self.members.values())

    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_s for m in self.members.values()), default=0.0)


@dataclass
class CoordinatorConfig:
    initial_rebalance_delay_s: float = 3.0  # group.initial.rebalance.delay.ms
    min_session_timeout_s: float = 6.0  # group.min.session.timeout.ms
    max_session_timeout_s: float = 1800.0  # group.max.session.timeout.ms
    expiry_check_interval_s: float = 0.5
    offsets_retention_s: float = 7 * 24 * 3600.0  # offsets.retention.minutes
    offsets_retention_check_interval_s: float = 600.0  # offsets.retention.check.interval.ms
    wall_clock_ms: Callable[[], int] = wall_clock_ms  # commit timestamps; a test may move it
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # KIP-848
