"""Durable group metadata: a coordinator restarted on the same store carries its groups on.

A "restart" here is a second GroupCoordinator loading the store the first one wrote (the
first one cancelled), on Trio's autojump clock; the gateway's ledger-backed store and real
clients across a process restart are tested in tests/kafka_clients/test_group_restart.py.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_groups.test_group_coordinator import MemoryOffsetStore, join_args, join_new_member

from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_coordinator import (
    CommittedOffset,
    CoordinatorConfig,
    GroupCoordinator,
    GroupError,
    GroupState,
)
from protocols.kafka.group_records import (
    GroupRecordError,
    GroupStateWriter,
    decode,
    encode_classic,
    encode_consumer,
)

TOPICS = {"t": 4}


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Run:
    """One coordinator incarnation on a store, in its own cancel scope."""

    def __init__(self, store: MemoryOffsetStore) -> None:
        self.store = store
        self.scope = trio.CancelScope()
        self.coordinator = GroupCoordinator(
            store, CoordinatorConfig(initial_rebalance_delay_s=0.5))

    async def _run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            await self.coordinator.run(task_status=task_status)

    @classmethod
    async def start(cls, nursery: trio.Nursery, store: MemoryOffsetStore) -> Run:
        run = cls(store)
        await nursery.start(run._run)
        return run


async def stable_pair(coordinator: GroupCoordinator) -> tuple[str, str]:
    """Two members joined and synced at generation 1; (leader, follower)."""
    results: dict[str, dict] = {}
    async with trio.open_nursery() as joins:
        joins.start_soon(join_new_member, coordinator, results)
        joins.start_soon(join_new_member, coordinator, results)
    leader = next(iter(results.values()))["leader"]
    follower = next(m for m in results if m != leader)
    async with trio.open_nursery() as syncs:
        syncs.start_soon(partial(coordinator.sync, group_id="g", member_id=follower,
                                 generation_id=1, assignments=[]))
        syncs.start_soon(partial(coordinator.sync, group_id="g", member_id=leader,
                                 generation_id=1,
                                 assignments=[(leader, b"A"), (follower, b"B")]))
    assert coordinator.groups["g"].state is GroupState.STABLE
    return leader, follower


async def test_classic_group_carries_on_after_a_restart(autojump_clock: object) -> None:
    store = MemoryOffsetStore()
    async with trio.open_nursery() as nursery:
        first = await Run.start(nursery, store)
        leader, follower = await stable_pair(first.coordinator)
        first.scope.cancel()
        await trio.sleep(8)  # down for 8 s of a 10 s session

        second = await Run.start(nursery, store)
        coordinator = second.coordinator
        group = coordinator.groups["g"]
        assert (group.state, group.generation_id, group.leader_id) == (
            GroupState.STABLE, 1, leader)
        for member in (leader, follower):
            coordinator.heartbeat(group_id="g", member_id=member, generation_id=1)
        await coordinator.commit_offsets(
            group_id="g", member_id=follower, generation_id=1,
            offsets={("t", 0): CommittedOffset(5)})
        # A follower re-sending SyncGroup gets its assignment back; nothing rebalanced.
        _, _, assignment = await coordinator.sync(
            group_id="g", member_id=follower, generation_id=1, assignments=[])
        assert assignment == b"B"
        assert group.state is GroupState.STABLE and group.generation_id == 1

        # Sessions count from the load: the leader keeps heartbeating, the follower goes
        # silent and expires one session timeout (10 s) after its last heartbeat.
        for _ in range(2):
            await trio.sleep(4)
            coordinator.heartbeat(group_id="g", member_id=leader, generation_id=1)
        assert follower in group.members  # 16 s since its heartbeat, 8 s since the load
        await trio.sleep(4)
        assert follower not in group.members
        nursery.cancel_scope.cancel()


async def test_answers_wait_until_the_group_is_durable(autojump_clock: object) -> None:
    """JoinGroup and SyncGroup answers are sent only after the record that holds them."""
    store = MemoryOffsetStore()
    released = trio.Event()
    seen: list[dict[str, Any] | None] = []
    store_group = store.store_group

    async def held(group_id: str, record: dict[str, Any] | None) -> None:
        await released.wait()
        await store_group(group_id, record)
        seen.append(record)

    store.store_group = held  # type: ignore[method-assign]
    answers: list[Any] = []
    async with trio.open_nursery() as nursery:
        coordinator = (await Run.start(nursery, store)).coordinator

        async def join_and_sync() -> None:
            first = await coordinator.join(**join_args())  # type: ignore[arg-type]
            answer = await coordinator.join(**join_args(first["member_id"]))  # type: ignore
            answers.append(answer)
            synced = await coordinator.sync(
                group_id="g", member_id=answer["member_id"], generation_id=1,
                assignments=[(answer["member_id"], b"mine")])
            answers.append(synced)

        nursery.start_soon(join_and_sync)
        await trio.sleep(5)  # less than the session: a slow write must not expire anyone
        assert answers == [] and coordinator.groups["g"].generation_id == 1
        released.set()
        await trio.sleep(1)
        assert len(answers) == 2
        assert [r and (r["state"], r["generation"]) for r in seen] == [
            ("CompletingRebalance", 1), ("Stable", 1)]
        assert store.group_records["g"]["members"][0]["assignment"] == "bWluZQ=="  # b"mine"
        nursery.cancel_scope.cancel()


async def test_a_group_recorded_mid_rebalance_rebalances_after_loading(
    autojump_clock: object,
) -> None:
    store = MemoryOffsetStore()
    async with trio.open_nursery() as nursery:
        first = await Run.start(nursery, store)
        leader, follower = await stable_pair(first.coordinator)
        assert await first.coordinator.leave("g", [(follower, None)]) == [0]
        assert store.group_records["g"]["state"] == "PreparingRebalance"
        first.scope.cancel()

        coordinator = (await Run.start(nursery, store)).coordinator
        assert list(coordinator.groups["g"].members) == [leader]
        with pytest.raises(GroupError) as info:
            coordinator.heartbeat(group_id="g", member_id=leader, generation_id=1)
        assert info.value.code == ErrorCode.REBALANCE_IN_PROGRESS
        again = await coordinator.join(**join_args(leader))  # type: ignore[arg-type]
        assert (again["error_code"], again["generation_id"]) == (0, 2)
        nursery.cancel_scope.cancel()


def consumer_beat(member_id: str, epoch: int, owned: frozenset | None = None) -> dict[str, Any]:
    return dict(
        group_id="cg", member_id=member_id, member_epoch=epoch, instance_id=None,
        rack_id=None, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"] if epoch == 0 else None, subscribed_topic_regex=None,
        server_assignor=None, owned=owned, client_id="c", client_host="/127.0.0.1",
        topics=TOPICS,
    )


async def stable_consumer_group(coordinator: GroupCoordinator) -> dict[str, dict[str, Any]]:
    """Two KIP-848 members converged on their target; member id -> last answer."""
    a = await coordinator.consumer_group_heartbeat(**consumer_beat("", 0))
    b = await coordinator.consumer_group_heartbeat(**consumer_beat("", 0))
    last = {a["member_id"]: a, b["member_id"]: b}
    owned = {mid: ans["assignment"] for mid, ans in last.items()}
    for _ in range(4):
        for mid in list(last):
            answer = await coordinator.consumer_group_heartbeat(
                **consumer_beat(mid, last[mid]["member_epoch"], owned[mid]))
            if answer["assignment"] is not None:
                owned[mid] = answer["assignment"]
            last[mid] = {**answer, "assignment": owned[mid]}
    group = coordinator.consumer_groups.groups["cg"]
    assert group.state.value == "Stable"
    return last


async def test_kip848_group_carries_on_after_a_restart(autojump_clock: object) -> None:
    store = MemoryOffsetStore()
    async with trio.open_nursery() as nursery:
        first = await Run.start(nursery, store)
        members = await stable_consumer_group(first.coordinator)
        epoch = first.coordinator.consumer_groups.groups["cg"].group_epoch
        first.scope.cancel()
        await trio.sleep(30)  # 30 s of a 45 s session

        coordinator = (await Run.start(nursery, store)).coordinator
        writes = store.group_writes
        for mid, last in members.items():
            answer = await coordinator.consumer_group_heartbeat(
                **consumer_beat(mid, last["member_epoch"], last["assignment"]))
            assert answer["member_epoch"] == last["member_epoch"]
            assert answer["assignment"] is None  # unchanged: nothing to reconcile
            await coordinator.commit_offsets(
                group_id="cg", member_id=mid, generation_id=last["member_epoch"],
                offsets={("t", 0): CommittedOffset(3)})
        group = coordinator.consumer_groups.groups["cg"]
        assert group.group_epoch == epoch and group.state.value == "Stable"
        assert store.group_writes == writes  # heartbeats that change nothing write nothing
        nursery.cancel_scope.cancel()


async def test_deleted_and_expired_groups_leave_tombstones(autojump_clock: object) -> None:
    store = MemoryOffsetStore()
    async with trio.open_nursery() as nursery:
        run = await Run.start(nursery, store)
        leader, follower = await stable_pair(run.coordinator)
        assert await run.coordinator.leave("g", [(leader, None), (follower, None)]) == [0, 0]
        await trio.sleep(60)  # the rebalance ends with nobody: recorded Empty
        assert store.group_records["g"]["state"] == "Empty"
        await run.coordinator.delete_group("g")
        assert "g" not in store.group_records
        run.scope.cancel()
        coordinator = (await Run.start(nursery, store)).coordinator
        assert "g" not in coordinator.groups
        nursery.cancel_scope.cancel()


async def test_an_unreadable_record_is_skipped_with_a_warning(
    autojump_clock: object, caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryOffsetStore()
    store.group_records = {"future": {"gv": 99, "protocol": "classic"},
                           "broken": {"gv": 1, "protocol": "classic", "state": "Stable"}}
    async with trio.open_nursery() as nursery:
        with caplog.at_level(logging.WARNING, logger="ledgerwire.kafka.groups"):
            coordinator = (await Run.start(nursery, store)).coordinator
        assert coordinator.groups == {}
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2 and not any(r.exc_info for r in warnings)
        # A new group under the id is recorded afresh.
        results: dict[str, dict] = {}
        await join_new_member(coordinator, results)
        nursery.cancel_scope.cancel()


async def test_a_failed_write_is_raised_and_issued_again() -> None:
    records: list[Any] = []
    failures = [RuntimeError("bookies gone")]

    async def store_group(group_id: str, record: dict[str, Any] | None) -> None:
        if failures:
            raise failures.pop()
        records.append(record)

    writer = GroupStateWriter(store_group)
    with pytest.raises(RuntimeError):
        await writer.write("g", {"gv": 1})
    await writer.write("g", {"gv": 1})
    await writer.write("g", {"gv": 1})  # unchanged: no write
    await writer.write("g", None)
    await writer.write("g", None)  # already gone
    assert records == [{"gv": 1}, None]


# ---- the record format: round trip, and bad records are refused cleanly ---------------------

names = st.text(min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(names, st.binary(max_size=16), st.booleans()), min_size=1,
                max_size=4, unique_by=lambda m: m[0]),
       st.integers(0, 2**31 - 1))
def test_classic_records_round_trip(members: list[tuple[str, bytes, bool]], gen: int) -> None:
    from protocols.kafka.group_model import Group, Member

    group = Group("g", state=GroupState.STABLE, generation_id=gen, protocol_type="consumer",
                  protocol_name="range", leader_id=members[0][0])
    for mid, blob, static in members:
        group.members[mid] = Member(mid, "i-" + mid if static else None, "c", "/h", 10.0, 30.0,
                                    "consumer", [("range", blob)], assignment=blob[::-1])
    record = json.loads(json.dumps(encode_classic(group)))
    again = decode("g", record, 0.0)
    assert encode_classic(again) == record  # type: ignore[arg-type]


async def test_consumer_records_round_trip(autojump_clock: object) -> None:
    store = MemoryOffsetStore()
    async with trio.open_nursery() as nursery:
        coordinator = (await Run.start(nursery, store)).coordinator
        await stable_consumer_group(coordinator)
        record = json.loads(json.dumps(encode_consumer(coordinator.consumer_groups.groups["cg"])))
        assert encode_consumer(decode("cg", record, 0.0)) == record  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["classic", "consumer"]), st.dictionaries(
    st.sampled_from(["state", "generation", "members", "protocol_type", "protocol_name",
                     "leader", "state_since_ms", "group_epoch", "assignment_epoch",
                     "assignor", "subscribed", "target"]), json_values))
def test_bad_records_are_refused_cleanly(protocol: str, fields: dict[str, Any]) -> None:
    try:
        decode("g", {"gv": 1, "protocol": protocol, **fields}, 0.0)
    except GroupRecordError:
        pass


async def test_a_heartbeat_after_a_failed_write_writes_the_group_again(
    autojump_clock: object,
) -> None:
    """An unchanged heartbeat skips the write only while the last one is known durable."""
    store = MemoryOffsetStore()
    store_group = store.store_group
    fail_next = [False]

    async def flaky(group_id: str, record: dict[str, Any] | None) -> None:
        if fail_next and fail_next[0]:
            fail_next[0] = False
            raise RuntimeError("bookies gone")
        await store_group(group_id, record)

    store.store_group = flaky  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        coordinator = (await Run.start(nursery, store)).coordinator
        first = await coordinator.consumer_group_heartbeat(**consumer_beat("", 0))
        member, epoch, owned = first["member_id"], first["member_epoch"], first["assignment"]
        fail_next[0] = True
        with pytest.raises(RuntimeError):  # the new subscription is not durable
            await coordinator.consumer_group_heartbeat(
                **{**consumer_beat(member, epoch, owned), "subscribed_topic_names": ["t", "u"]})
        assert store.group_records["cg"]["members"][0]["topics"] == ["t"]
        # The same heartbeat again changes nothing in memory, but the record is not known to
        # be durable: it is written.
        again = await coordinator.consumer_group_heartbeat(
            **{**consumer_beat(member, epoch, owned), "subscribed_topic_names": ["t", "u"]})
        assert store.group_records["cg"]["members"][0]["topics"] == ["t", "u"]
        writes = store.group_writes
        await coordinator.consumer_group_heartbeat(
            **consumer_beat(member, again["member_epoch"], owned))
        assert store.group_writes == writes  # now steady: no write
        nursery.cancel_scope.cancel()
