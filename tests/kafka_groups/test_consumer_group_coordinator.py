"""KIP-848 consumer groups: epochs, server-side assignment and revoke-before-assign."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka.assignors import AssignorMember, assign_range, assign_uniform
from protocols.kafka.consumer_group_coordinator import (
    ConsumerGroupCoordinator,
    ConsumerGroupError,
    ConsumerGroupState,
)
from protocols.kafka.errors import ErrorCode

TOPICS = {"t": 6}


def beat(
    coordinator: ConsumerGroupCoordinator,
    member_id: str,
    epoch: int,
    owned: frozenset | None = None,
    **extra: Any,
) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        group_id="g",
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"] if epoch == 0 else None,
        subscribed_topic_regex=None,
        server_assignor=None,
        owned=owned,
        client_id="c",
        client_host="/127.0.0.1",
        topics=TOPICS,
    )
    args.update(extra)
    return coordinator.heartbeat(**args)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_join_revoke_then_assign(autojump_clock: object) -> None:
    coordinator = ConsumerGroupCoordinator()
    a = beat(coordinator, "a", 0)
    assert a["member_epoch"] == 1 and len(a["assignment"]) == 6
    assert a["heartbeat_interval_ms"] == 5000
    b = beat(coordinator, "b", 0)
    # b's share is still a's: b gets nothing until a has revoked it.
    assert b["member_epoch"] == 2 and b["assignment"] == frozenset()
    group = coordinator.groups["g"]
    assert group.state is ConsumerGroupState.RECONCILING
    a2 = beat(coordinator, "a", 1, owned=a["assignment"])
    assert a2["member_epoch"] == 1 and len(a2["assignment"]) == 3  # revoke three, keep epoch
    assert beat(coordinator, "b", 2)["assignment"] is None  # still held by a
    a3 = beat(coordinator, "a", 1, owned=a2["assignment"])  # a acknowledges the revocation
    assert a3["member_epoch"] == 2
    b2 = beat(coordinator, "b", 2, owned=frozenset())
    assert b2["assignment"] == frozenset(("t", p) for p in range(6)) - a2["assignment"]
    assert group.state is ConsumerGroupState.STABLE
    # Leaving frees the partitions for the remaining member.
    assert beat(coordinator, "b", -1)["member_epoch"] == -1
    a4 = beat(coordinator, "a", 2, owned=a2["assignment"])
    assert a4["member_epoch"] == 3 and len(a4["assignment"]) == 6


async def test_epoch_fencing_and_unknown_members(autojump_clock: object) -> None:
    coordinator = ConsumerGroupCoordinator()
    beat(coordinator, "a", 0)
    for epoch, member, code in [
        (5, "a", ErrorCode.FENCED_MEMBER_EPOCH),
        (1, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),
    ]:
        with pytest.raises(ConsumerGroupError) as info:
            beat(coordinator, member, epoch)
        assert info.value.code == code
    with pytest.raises(ConsumerGroupError) as info:
        beat(coordinator, "b", 0, server_assignor="sticky-ish")
    assert info.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    with pytest.raises(ConsumerGroupError) as info:
        coordinator.validate_offset_commit("g", "a", 0)
    assert info.value.code == ErrorCode.STALE_MEMBER_EPOCH
    coordinator.validate_offset_commit("g", "a", 1)


async def test_session_expiry_and_static_rejoin(autojump_clock: object) -> None:
    coordinator = ConsumerGroupCoordinator()
    first = beat(coordinator, "a", 0, instance_id="i1")
    assert beat(coordinator, "a", -2)["member_epoch"] == -2  # static member steps out
    # The restarted instance takes over the same assignment and epoch: no new group epoch.
    again = beat(coordinator, "a2", 0, instance_id="i1")
    assert again["assignment"] == first["assignment"] and coordinator.groups["g"].group_epoch == 1
    with pytest.raises(ConsumerGroupError) as info:
        beat(coordinator, "a3", 0, instance_id="i1")
    assert info.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    await trio.sleep(46)
    coordinator.expire(trio.current_time())
    assert coordinator.groups["g"].members == {}


def test_assignors() -> None:
    members = [AssignorMember(m, frozenset({"t"}), frozenset()) for m in "abc"]
    ranged = assign_range(members, {"t": 7})
    assert ranged["a"] == {("t", 0), ("t", 1), ("t", 2)} and ranged["c"] == {("t", 5), ("t", 6)}
    sticky = [
        AssignorMember("a", frozenset({"t"}), frozenset(("t", p) for p in range(4))),
        AssignorMember("b", frozenset({"t"}), frozenset(("t", p) for p in range(4, 7))),
        AssignorMember("c", frozenset({"t"}), frozenset()),
    ]
    uniform = assign_uniform(sticky, {"t": 7})
    assert sorted(len(v) for v in uniform.values()) == [2, 2, 3]
    assert uniform["a"] <= sticky[0].current and uniform["b"] <= sticky[1].current


class SimulatedClient:
    """A KIP-848 client that adopts every assignment it is sent (revoking at once) and reports
    what it owns on each heartbeat."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: frozenset = frozenset()

    def heartbeat(self, coordinator: ConsumerGroupCoordinator, topics: dict[str, int]) -> None:
        answer = beat(coordinator, self.member_id, self.epoch, owned=self.owned, topics=topics)
        self.epoch = answer["member_epoch"]
        if answer["assignment"] is not None:
            self.owned = answer["assignment"]


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["join", "beat", "leave", "grow"]), st.integers(0, 5)),
        min_size=1,
        max_size=60,
    )
)
def test_no_partition_ever_has_two_owners(steps: list[tuple[str, int]]) -> None:
    async def scenario() -> None:
        coordinator = ConsumerGroupCoordinator()
        topics = {"t": 6}
        clients: dict[int, SimulatedClient] = {}
        for action, index in steps:
            client = clients.get(index)
            if action == "join" and client is None:
                clients[index] = SimulatedClient(f"m{index}")
                clients[index].heartbeat(coordinator, topics)
            elif action == "beat" and client is not None:
                client.heartbeat(coordinator, topics)
            elif action == "leave" and client is not None:
                beat(coordinator, client.member_id, -1, topics=topics)
                del clients[index]
            elif action == "grow":
                topics = {"t": topics["t"] + 1}
            owners: dict[tuple[str, int], str] = {}
            for c in clients.values():
                for tp in c.owned:
                    assert tp not in owners, f"{tp} owned by {owners[tp]} and {c.member_id}"
                    owners[tp] = c.member_id
        # Left alone, the group converges: every partition owned, balanced within one.
        for _ in range(4):
            for c in clients.values():
                c.heartbeat(coordinator, topics)
        if clients:
            counts = sorted(len(c.owned) for c in clients.values())
            assert sum(counts) == topics["t"] and counts[-1] - counts[0] <= 1

    trio.run(scenario)
