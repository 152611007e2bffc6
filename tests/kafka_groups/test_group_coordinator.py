"""The classic group coordinator's state machine, on Trio's autojump clock."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import trio
import trio.testing

from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_coordinator import (
    ALLOWED_TRANSITIONS,
    CommittedOffset,
    CoordinatorConfig,
    GroupCoordinator,
    GroupError,
    GroupState,
    OffsetKey,
)


class MemoryOffsetStore:
    def __init__(self) -> None:
        self.state: dict[str, dict[OffsetKey, CommittedOffset]] = {}
        self.writes = 0

    async def load(self) -> dict[str, dict[OffsetKey, CommittedOffset]]:
        return {g: dict(o) for g, o in self.state.items()}

    async def commit(self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        self.writes += 1
        self.state.setdefault(group_id, {}).update(offsets)

    async def delete(self, group_id: str, keys: list[OffsetKey] | None) -> None:
        if keys is None:
            self.state.pop(group_id, None)
        else:
            for key in keys:
                self.state.get(group_id, {}).pop(key, None)


def join_args(member_id: str = "", **overrides: object) -> dict[str, object]:
    args: dict[str, object] = dict(
        group_id="g", member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=[("range", b"meta-" + member_id.encode()), ("roundrobin", b"rr")],
        session_timeout_ms=10_000, rebalance_timeout_ms=30_000, client_id="c",
        client_host="/127.0.0.1", require_known_member_id=True,
    )
    args.update(overrides)
    return args


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def start(nursery: trio.Nursery) -> GroupCoordinator:
    coordinator = GroupCoordinator(MemoryOffsetStore(), CoordinatorConfig(initial_rebalance_delay_s=1.0))
    await nursery.start(coordinator.run)
    return coordinator


async def join_new_member(coordinator: GroupCoordinator, results: dict[str, dict]) -> None:
    first = await coordinator.join(**join_args())  # type: ignore[arg-type]
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    answer = await coordinator.join(**join_args(first["member_id"]))  # type: ignore[arg-type]
    results[answer["member_id"]] = answer


async def test_two_members_rebalance_sync_and_heartbeat(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        results: dict[str, dict] = {}
        async with trio.open_nursery() as joins:
            joins.start_soon(join_new_member, coordinator, results)
            joins.start_soon(join_new_member, coordinator, results)
        assert len(results) == 2
        generations = {r["generation_id"] for r in results.values()}
        assert generations == {1}
        leader = next(iter(results.values()))["leader"]
        assert all(r["leader"] == leader for r in results.values())
        assert len(results[leader]["members"]) == 2
        follower = next(m for m in results if m != leader)
        assert results[follower]["members"] == []
        assert results[leader]["protocol_name"] == "range"
        group = coordinator.groups["g"]
        assert group.state is GroupState.COMPLETING_REBALANCE

        synced: dict[str, bytes] = {}

        async def sync(member: str, assignments: list[tuple[str, bytes]]) -> None:
            _, _, synced[member] = await coordinator.sync(
                group_id="g", member_id=member, generation_id=1, assignments=assignments
            )

        async with trio.open_nursery() as syncs:
            syncs.start_soon(sync, follower, [])
            await trio.sleep(0.1)
            syncs.start_soon(sync, leader, [(leader, b"A"), (follower, b"B")])
        assert synced == {leader: b"A", follower: b"B"}
        assert group.state is GroupState.STABLE
        coordinator.heartbeat(group_id="g", member_id=follower, generation_id=1)
        with pytest.raises(GroupError) as info:
            coordinator.heartbeat(group_id="g", member_id=follower, generation_id=0)
        assert info.value.code == ErrorCode.ILLEGAL_GENERATION

        # The follower leaves: the leader's next heartbeat learns of the rebalance.
        assert coordinator.leave("g", [(follower, None)]) == [0]
        assert group.state is GroupState.PREPARING_REBALANCE
        with pytest.raises(GroupError) as info:
            coordinator.heartbeat(group_id="g", member_id=leader, generation_id=1)
        assert info.value.code == ErrorCode.REBALANCE_IN_PROGRESS
        again = await coordinator.join(**join_args(leader))  # type: ignore[arg-type]
        assert again["generation_id"] == 2 and [m["member_id"] for m in again["members"]] == [leader]
        nursery.cancel_scope.cancel()


async def test_session_expiry_removes_silent_member(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        results: dict[str, dict] = {}
        await join_new_member(coordinator, results)
        (member,) = results
        await coordinator.sync(group_id="g", member_id=member, generation_id=1,
                               assignments=[(member, b"x")])
        assert coordinator.groups["g"].state is GroupState.STABLE
        await trio.sleep(11)  # longer than the 10 s session, with no heartbeat
        group = coordinator.groups["g"]
        assert member not in group.members
        # With no member left to rejoin, the rebalance ends with an Empty group.
        await trio.sleep(31)
        assert group.state is GroupState.EMPTY
        nursery.cancel_scope.cancel()


async def test_offsets_commit_fetch_and_generation_checks(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        # A simple consumer (no membership) commits with generation -1.
        await coordinator.commit_offsets(
            group_id="simple", member_id="", generation_id=-1,
            offsets={("t", 0): CommittedOffset(42, metadata="m")},
        )
        assert coordinator.fetch_offsets("simple", [("t", 0), ("t", 1)]) == {
            ("t", 0): CommittedOffset(42, metadata="m")
        }
        results: dict[str, dict] = {}
        await join_new_member(coordinator, results)
        (member,) = results
        with pytest.raises(GroupError) as info:
            await coordinator.commit_offsets(
                group_id="g", member_id=member, generation_id=7,
                offsets={("t", 0): CommittedOffset(1)},
            )
        assert info.value.code == ErrorCode.ILLEGAL_GENERATION
        with pytest.raises(GroupError) as info:
            await coordinator.delete_group("g")
        assert info.value.code == ErrorCode.NON_EMPTY_GROUP
        await coordinator.delete_group("simple")
        assert coordinator.fetch_offsets("simple", None) == {}
        nursery.cancel_scope.cancel()


def test_every_state_has_a_transition_rule() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(GroupState)
    assert ALLOWED_TRANSITIONS[GroupState.DEAD] == frozenset()
