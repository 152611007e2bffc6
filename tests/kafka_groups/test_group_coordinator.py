"""The classic group coordinator's state machine, on Trio's autojump clock."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from protocols.kafka.consumer_group_coordinator import ConsumerGroupConfig
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
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
        self.group_records: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.group_writes = 0

    async def load(self) -> dict[str, dict[OffsetKey, CommittedOffset]]:
        return {g: dict(o) for g, o in self.state.items()}

    async def load_groups(self) -> dict[str, dict[str, Any]]:
        return json.loads(json.dumps(self.group_records))  # as a log would give them back

    async def store_group(self, group_id: str, record: dict[str, Any] | None) -> None:
        self.group_writes += 1
        if record is None:
            self.group_records.pop(group_id, None)
        else:
            self.group_records[group_id] = json.loads(json.dumps(record))

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
    coordinator = GroupCoordinator(
        MemoryOffsetStore(), CoordinatorConfig(initial_rebalance_delay_s=1.0)
    )
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
        assert await coordinator.leave("g", [(follower, None)]) == [0]
        assert group.state is GroupState.PREPARING_REBALANCE
        with pytest.raises(GroupError) as info:
            coordinator.heartbeat(group_id="g", member_id=leader, generation_id=1)
        assert info.value.code == ErrorCode.REBALANCE_IN_PROGRESS
        again = await coordinator.join(**join_args(leader))  # type: ignore[arg-type]
        assert again["generation_id"] == 2
        assert [m["member_id"] for m in again["members"]] == [leader]
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


async def test_sessions_expire_at_their_own_deadline_and_the_group_empties_at_once(
    autojump_clock: object,
) -> None:
    """Each member leaves the group within a few ms of last heartbeat + session timeout (not on
    a coarse tick), and DeleteGroups right after the last one expired finds the group Empty."""
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        ids = await stable_static_group(coordinator)
        group = coordinator.groups["g"]
        await trio.sleep(0.37)  # off any tick a periodic check would use
        coordinator.heartbeat(group_id="g", member_id=ids["a"], generation_id=1)
        coordinator.heartbeat(group_id="g", member_id=ids["b"], generation_id=1)
        beat = trio.current_time()
        await trio.sleep(0.73)
        coordinator.heartbeat(group_id="g", member_id=ids["b"], generation_id=1)
        b_beat = trio.current_time()
        await trio.sleep_until(beat + 10.0 - 0.01)  # the 10 s session of join_args
        assert ids["a"] in group.members
        await trio.sleep_until(beat + 10.0 + 0.01)
        assert ids["a"] not in group.members and ids["b"] in group.members
        await trio.sleep_until(b_beat + 10.0 + 0.01)
        assert not group.members
        assert group.state is GroupState.EMPTY
        await coordinator.delete_group("g")
        assert "g" not in coordinator.groups
        nursery.cancel_scope.cancel()


async def test_kip848_members_expire_at_their_own_deadline(autojump_clock: object) -> None:
    """The coordinator's expiry task also ends KIP-848 sessions at their deadline."""
    async with trio.open_nursery() as nursery:
        coordinator = GroupCoordinator(MemoryOffsetStore(), CoordinatorConfig(
            consumer_groups=ConsumerGroupConfig(session_timeout_s=10.0)))
        await nursery.start(coordinator.run)
        await trio.sleep(0.41)
        coordinator.consumer_groups.heartbeat(
            group_id="g848", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
            subscribed_topic_regex=None, server_assignor=None, owned=None, client_id="c",
            client_host="/127.0.0.1", topics={"t": 2})
        beat = trio.current_time()
        await trio.sleep_until(beat + 10.0 - 0.01)
        assert "m" in coordinator.consumer_groups.groups["g848"].members
        await trio.sleep_until(beat + 10.0 + 0.01)
        assert coordinator.consumer_groups.groups["g848"].members == {}
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


async def stable_static_group(coordinator: GroupCoordinator) -> dict[str, str]:
    """Two static members a and b, synced; returns instance id -> member id."""
    answers: dict[str, dict] = {}

    async def join_static(instance: str) -> None:
        args = join_args(group_instance_id=instance)
        answers[instance] = await coordinator.join(**args)  # type: ignore[arg-type]

    async with trio.open_nursery() as joins:
        joins.start_soon(join_static, "a")
        joins.start_soon(join_static, "b")
    leader = answers["a"]["leader"]
    ids = {inst: a["member_id"] for inst, a in answers.items()}
    async with trio.open_nursery() as syncs:
        for mid in ids.values():
            given = [(m, b"assign-" + i.encode()) for i, m in ids.items()] if mid == leader else []
            syncs.start_soon(partial(coordinator.sync, group_id="g", member_id=mid,
                                     generation_id=1, assignments=given))
    assert coordinator.groups["g"].state is GroupState.STABLE
    return ids


async def test_static_member_rejoin_causes_no_rebalance(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        ids = await stable_static_group(coordinator)
        group = coordinator.groups["g"]
        # Instance b restarts: it joins with no member id, same instance id and protocols.
        again = await coordinator.join(**join_args(group_instance_id="b"))  # type: ignore[arg-type]
        assert again["error_code"] == 0 and again["generation_id"] == 1
        assert again["member_id"] != ids["b"]
        assert group.state is GroupState.STABLE and group.generation_id == 1
        _, _, assignment = await coordinator.sync(
            group_id="g", member_id=again["member_id"], generation_id=1, assignments=[])
        assert assignment == b"assign-b"
        # The old incarnation is fenced; the other member sees no rebalance.
        with pytest.raises(GroupError) as info:
            coordinator.heartbeat(group_id="g", member_id=ids["b"], generation_id=1,
                                  group_instance_id="b")
        assert info.value.code == ErrorCode.FENCED_INSTANCE_ID
        coordinator.heartbeat(group_id="g", member_id=ids["a"], generation_id=1,
                              group_instance_id="a")
        # A static member rejoining with changed protocols does rebalance.
        changed = join_args(group_instance_id="a", protocols=[("roundrobin", b"new")])
        async with trio.open_nursery() as rejoin:
            rejoin.start_soon(partial(coordinator.join, **changed))  # type: ignore[arg-type]
            await trio.sleep(0.1)
            assert group.state is GroupState.PREPARING_REBALANCE
            rejoin.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def test_unknown_member_and_stale_generation_answers(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        ids = await stable_static_group(coordinator)
        for call, code in [
            (partial(coordinator.heartbeat, group_id="g", member_id="nobody", generation_id=1),
             ErrorCode.UNKNOWN_MEMBER_ID),
            (partial(coordinator.heartbeat, group_id="nogroup", member_id="x", generation_id=1),
             ErrorCode.UNKNOWN_MEMBER_ID),
            (partial(coordinator.heartbeat, group_id="g", member_id=ids["a"], generation_id=0),
             ErrorCode.ILLEGAL_GENERATION),
        ]:
            with pytest.raises(GroupError) as info:
                call()
            assert info.value.code == code
        with pytest.raises(GroupError) as info:
            await coordinator.join(**join_args("made-up"))  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.UNKNOWN_MEMBER_ID
        with pytest.raises(GroupError) as info:
            await coordinator.join(**join_args(session_timeout_ms=1))  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.INVALID_SESSION_TIMEOUT
        with pytest.raises(GroupError) as info:
            await coordinator.sync(group_id="g", member_id=ids["a"], generation_id=5,
                                   assignments=[])
        assert info.value.code == ErrorCode.ILLEGAL_GENERATION
        with pytest.raises(GroupError) as info:
            await coordinator.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                             offsets={("t", 0): CommittedOffset(1)})
        assert info.value.code == ErrorCode.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()


async def test_commit_allowed_while_preparing_rebalance(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        ids = await stable_static_group(coordinator)
        assert await coordinator.leave("g", [("", "b")]) == [0]
        assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
        # An eager consumer commits what it is giving up before it rejoins.
        await coordinator.commit_offsets(group_id="g", member_id=ids["a"], generation_id=1,
                                         offsets={("t", 0): CommittedOffset(5)})
        assert coordinator.fetch_offsets("g", None)[("t", 0)].offset == 5
        nursery.cancel_scope.cancel()


async def test_offsets_of_groups_empty_past_retention_expire(autojump_clock: object) -> None:
    now = [1_000_000_000_000]
    async with trio.open_nursery() as nursery:
        coordinator = GroupCoordinator(MemoryOffsetStore(), CoordinatorConfig(
            initial_rebalance_delay_s=0.0, offsets_retention_s=3600.0,
            wall_clock_ms=lambda: now[0]))
        await nursery.start(coordinator.run)
        for group_id, committed_at in [("old", now[0]), ("fresh", now[0] + 3_000_000)]:
            await coordinator.commit_offsets(
                group_id=group_id, member_id="", generation_id=-1,
                offsets={("t", 0): CommittedOffset(1, commit_timestamp_ms=committed_at)})
        now[0] += 3_700_000
        assert await coordinator.expire_offsets() == ["old"]
        assert coordinator.fetch_offsets("old", None) == {}
        assert coordinator.fetch_offsets("fresh", None)
        assert coordinator.known_group_ids() == ["fresh"]
        nursery.cancel_scope.cancel()


async def test_member_not_rejoining_within_rebalance_timeout_is_dropped(
    autojump_clock: object,
) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        ids = await stable_static_group(coordinator)
        group = coordinator.groups["g"]
        started = trio.current_time()
        # "a" rejoins with new protocols; "b" keeps heartbeating but never rejoins.
        changed = join_args(ids["a"], group_instance_id="a", protocols=[("range", b"v2")])

        async def keep_heartbeating() -> None:
            while True:
                with pytest.raises(GroupError):
                    coordinator.heartbeat(group_id="g", member_id=ids["b"], generation_id=1)
                await trio.sleep(1)

        nursery.start_soon(keep_heartbeating)
        answer = await coordinator.join(**changed)  # type: ignore[arg-type]
        waited = trio.current_time() - started
        assert 29 <= waited <= 31  # the 30 s rebalance timeout of join_args
        assert answer["generation_id"] == 2
        assert [m["member_id"] for m in answer["members"]] == [ids["a"]]
        assert ids["b"] not in group.members
        nursery.cancel_scope.cancel()


async def test_classic_and_consumer_groups_share_the_id_space(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        coordinator = await start(nursery)
        await stable_static_group(coordinator)
        beat: dict[str, Any] = dict(
            group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
            subscribed_topic_regex=None, server_assignor=None, owned=None, client_id="c",
            client_host="/h", topics={"t": 2},
        )
        with pytest.raises(KafkaProtocolError) as info:
            coordinator.consumer_groups.heartbeat(**beat)
        assert info.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        answer = coordinator.consumer_groups.heartbeat(**{**beat, "group_id": "fresh"})
        assert answer["member_epoch"] == 1
        with pytest.raises(GroupError) as info:
            await coordinator.join(**join_args(group_id="fresh"))  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert coordinator.known_group_ids() == ["fresh", "g"]
        nursery.cancel_scope.cancel()


class SlowLog(MemoryOffsetStore):
    """An offsets log whose next write can be held (`hold`), to order writes in a test."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, dict[OffsetKey, CommittedOffset]]] = []
        self.hold: trio.Event | None = None

    async def commit(self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]) -> None:
        hold, self.hold = self.hold, None
        if hold is not None:
            await hold.wait()
        self.records.append((group_id, dict(offsets)))
        await super().commit(group_id, offsets)


async def test_advance_offsets_never_moves_a_commit_back() -> None:
    """TTL/backlog eviction read a group's offset, then advance it; a consumer's commit past the
    target meanwhile must survive in memory and as the last record of the log."""
    log = SlowLog()
    coordinator = GroupCoordinator(log, CoordinatorConfig())
    key = ("t", 0)
    await coordinator.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                     offsets={key: CommittedOffset(2, -1, "", 0)})
    release = log.hold = trio.Event()
    async with trio.open_nursery() as nursery:
        # Eviction to 3 is held in the log; the consumer's commit of 7 lands first.
        nursery.start_soon(coordinator.advance_offsets, "g", {key: CommittedOffset(3, -1, "", 1)})
        await trio.testing.wait_all_tasks_blocked()
        await coordinator.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                         offsets={key: CommittedOffset(7, -1, "", 2)})
        release.set()
    assert coordinator.fetch_offsets("g", [key])[key].offset == 7
    assert log.records[-1][1][key].offset == 7  # a replay ends at 7, not 3
    writes = log.writes  # advancing to an offset at or below the committed one writes nothing
    await coordinator.advance_offsets("g", {key: CommittedOffset(5, -1, "", 3)})
    assert log.writes == writes and coordinator.fetch_offsets("g", [key])[key].offset == 7
    await coordinator.advance_offsets("g", {key: CommittedOffset(9, -1, "", 4)})
    assert coordinator.fetch_offsets("g", [key])[key].offset == 9
