"""Consumer-group acceptance with every mainstream client, each member its own process.

With confluent-kafka, kafka-python, aiokafka and kafkajs: three members share a 6-partition
topic and no committed message is read twice; a member that leaves has its partitions moved
within the session timeout; a member SIGKILLed is evicted after the session timeout; committed
offsets survive a broker restart; a static member's restart causes no rebalance (not kafkajs:
it has no static membership). librdkafka's cooperative-sticky assignor rebalances
incrementally, and `group.protocol=consumer` consumes through KIP-848 (members moving on
leave, a SIGKILLed member fenced after the server's session timeout, a static member's restart
keeping its partitions). Sessions are 6 s and the broker's initial rebalance delay 0.5 s to
keep the run short (about 2.5 minutes).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.group_members import (
    CLIENTS,
    Member,
    create_topic,
    produce_numbered,
    wait_for,
)
from tests.support.standalone import Standalone, running_standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_TIMEOUT_S = 6.0
PARTITIONS = 6
BROKER_ARGS = ["--group-initial-rebalance-delay-ms", "500"]


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One standalone for the module's cases: their topics and groups are distinct (some
    restart it)."""
    with running_standalone(tmp_path_factory.mktemp("groups") / "data",
                            extra_args=BROKER_ARGS) as server:  # fmt: skip
        yield server


@pytest.fixture
def server(module_server: Standalone) -> Standalone:
    """The module's standalone, started again if an earlier case left it down."""
    if module_server.proc is None or module_server.proc.poll() is not None:
        module_server.start()
    return module_server


def covered(members: list[Member], expected: set[int]) -> bool:
    """Every partition owned by exactly one of `members`."""
    owned = [p for m in members for p in m.partitions]
    return sorted(owned) == sorted(expected)


def committed_values(members: list[Member]) -> collections.Counter[str]:
    return collections.Counter(v for m in members for v in m.values())


def all_consumed(members: list[Member], expected: set[str]) -> bool:
    return expected <= set(committed_values(members))


def assert_no_duplicates(members: list[Member]) -> None:
    twice = [v for v, n in committed_values(members).items() if n > 1]
    assert not twice, f"read twice after commit: {sorted(twice)[:20]}"


@pytest.mark.parametrize("client", CLIENTS)
def test_group_shares_rebalances_evicts_and_keeps_offsets(server: Standalone, client: str) -> None:
    topic, group = f"share-{client}", f"g-{client}"
    create_topic(server.bootstrap, topic, PARTITIONS)
    members = [Member(client, server.bootstrap, topic, group) for _ in range(3)]
    everyone = list(members)
    try:
        wait_for(
            lambda: (
                covered(members, set(range(PARTITIONS)))
                and all(len(m.partitions) == 2 for m in members)
            ),
            60,
            "3 members x 2 partitions",
            everyone,
        )
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 300)
        wait_for(lambda: all_consumed(everyone, sent), 60, "first 300 consumed", everyone)
        assert_no_duplicates(everyone)

        # A member leaves: its partitions move to the others within the session timeout.
        leaving = members.pop(0)
        leaving.stop()
        moved_in = wait_for(
            lambda: covered(members, set(range(PARTITIONS))), 30, "partitions moved", everyone
        )
        assert moved_in < SESSION_TIMEOUT_S, f"leave took {moved_in:.1f}s to rebalance"
        sent |= produce_numbered(server.bootstrap, topic, PARTITIONS, 300, 300)
        wait_for(lambda: all_consumed(everyone, sent), 60, "second 300 consumed", everyone)
        assert_no_duplicates(everyone)

        # A member is killed: it is evicted once its session times out.
        killed = members.pop(0)
        killed.kill()
        evicted_in = wait_for(
            lambda: covered(members, set(range(PARTITIONS))), 40, "eviction", everyone
        )
        assert SESSION_TIMEOUT_S - 1.5 < evicted_in < SESSION_TIMEOUT_S + 12, evicted_in
        sent |= produce_numbered(server.bootstrap, topic, PARTITIONS, 600, 300)
        wait_for(lambda: all_consumed(everyone, sent), 60, "third 300 consumed", everyone)
        assert_no_duplicates(everyone)
        members[0].stop()

        # Committed offsets survive a broker restart: a new member reads only new messages.
        server.restart()
        # Standalone.start() may see the previous run's "ready" line in the appended log.
        AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30)
        fresh = Member(client, server.bootstrap, topic, group)
        everyone.append(fresh)
        members = [fresh]
        wait_for(
            lambda: covered(members, set(range(PARTITIONS))), 60, "member after restart", everyone
        )
        newer = produce_numbered(server.bootstrap, topic, PARTITIONS, 900, 60)
        wait_for(lambda: all_consumed(members, newer), 60, "messages after restart", everyone)
        assert set(fresh.values()) == newer
        assert_no_duplicates(everyone)
    finally:
        for member in everyone:
            member.stop()


@pytest.mark.parametrize("client", [c for c in CLIENTS if c != "kafkajs"])
def test_static_member_restart_causes_no_rebalance(server: Standalone, client: str) -> None:
    topic, group = f"static-{client}", f"static-{client}"
    create_topic(server.bootstrap, topic, PARTITIONS)
    # "steady" joins first and so leads the group. A restarted *leader* re-runs the client-side
    # assignment unless its JoinGroup is v9+ (skip_assignment, KIP-814); kafka-python (v7)
    # then rejoins when its metadata snapshot moves, against Kafka as here. So the follower
    # restarts, the usual rolling-restart case.
    steady = Member(client, server.bootstrap, topic, group, instance_id="steady")
    members = [steady]
    try:
        wait_for(lambda: len(steady.partitions) == PARTITIONS, 60, "leader alone", members)
        restarting = Member(client, server.bootstrap, topic, group, instance_id="restarting")
        members.append(restarting)
        wait_for(
            lambda: covered(members, set(range(PARTITIONS))) and len(steady.partitions) == 3,
            60,
            "two static members x 3 partitions",
            members,
        )
        before = restarting.partitions
        steady_events = len(steady.assignment_events())
        restarting.kill()  # no LeaveGroup; the instance comes straight back
        again = Member(client, server.bootstrap, topic, group, instance_id="restarting")
        members.append(again)
        back_in = wait_for(lambda: again.partitions == before, 30, "same partitions back", members)
        assert back_in < SESSION_TIMEOUT_S
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 120)
        wait_for(lambda: all_consumed([steady, again], sent), 60, "consumed after restart", members)
        # The other member never saw a rebalance.
        assert len(steady.assignment_events()) == steady_events
        assert_no_duplicates(members)
    finally:
        for member in members:
            member.stop()


def test_cooperative_sticky_rebalances_incrementally(server: Standalone) -> None:
    topic, group = "coop", "coop"
    create_topic(server.bootstrap, topic, PARTITIONS)
    first = Member("confluent-kafka", server.bootstrap, topic, group, strategy="cooperative-sticky")
    members = [first]
    try:
        wait_for(lambda: len(first.partitions) == PARTITIONS, 60, "first member owns all", members)
        second = Member(
            "confluent-kafka", server.bootstrap, topic, group, strategy="cooperative-sticky"
        )
        members.append(second)
        wait_for(
            lambda: covered(members, set(range(PARTITIONS))) and len(second.partitions) == 3,
            60,
            "incremental hand-over",
            members,
        )
        # The first member only ever gave up what moved; it never dropped everything.
        revokes = [e for e in first.assignment_events() if e["cause"] == "revoke"]
        assert revokes and all(e["partitions"] for e in revokes)
        assert {p for e in revokes for p in e["delta"]} == second.partitions
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 120)
        wait_for(lambda: all_consumed(members, sent), 60, "consumed", members)
        assert_no_duplicates(members)
    finally:
        for member in members:
            member.stop()


def test_kip848_consumer_protocol(server: Standalone) -> None:
    topic, group = "kip848", "kip848"
    create_topic(server.bootstrap, topic, PARTITIONS)
    members = [
        Member("confluent-kafka", server.bootstrap, topic, group, protocol="consumer")
        for _ in range(3)
    ]
    everyone = list(members)
    try:
        wait_for(
            lambda: (
                covered(members, set(range(PARTITIONS)))
                and all(len(m.partitions) == 2 for m in members)
            ),
            60,
            "3 x 2 via KIP-848",
            everyone,
        )
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 300)
        wait_for(lambda: all_consumed(everyone, sent), 60, "consumed via KIP-848", everyone)
        assert_no_duplicates(everyone)
        members.pop(0).stop()
        # The server's heartbeat interval (5 s) paces the hand-over; the session is 45 s.
        wait_for(
            lambda: covered(members, set(range(PARTITIONS))), 30, "KIP-848 hand-over", everyone
        )
        sent |= produce_numbered(server.bootstrap, topic, PARTITIONS, 300, 300)
        wait_for(lambda: all_consumed(everyone, sent), 60, "consumed after hand-over", everyone)
        assert_no_duplicates(everyone)
    finally:
        for member in everyone:
            member.stop()


def test_kip848_member_killed_is_evicted(tmp_path: Path) -> None:
    """With the server's KIP-848 session timeout set to 6 s (heartbeats every 1 s), a member
    SIGKILLed is fenced after its session and its partitions go to the others."""
    server = Standalone(
        tmp_path / "data",
        extra_args=[
            *BROKER_ARGS,
            "--group-consumer-session-timeout-ms",
            "6000",
            "--group-consumer-heartbeat-interval-ms",
            "1000",
        ],
    )
    server.start()
    topic, group = "kip848-kill", "kip848-kill"
    members: list[Member] = []
    everyone: list[Member] = []
    try:
        create_topic(server.bootstrap, topic, PARTITIONS)
        members = [
            Member("confluent-kafka", server.bootstrap, topic, group, protocol="consumer")
            for _ in range(3)
        ]
        everyone = list(members)
        wait_for(
            lambda: all(len(m.partitions) == 2 for m in members), 60, "3 x 2 via KIP-848", everyone
        )
        members.pop(0).kill()
        evicted_in = wait_for(
            lambda: covered(members, set(range(PARTITIONS))), 40, "KIP-848 eviction", everyone
        )
        assert 4.5 < evicted_in < SESSION_TIMEOUT_S + 8, evicted_in
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 300)
        wait_for(lambda: all_consumed(members, sent), 60, "consumed after eviction", everyone)
        assert_no_duplicates(everyone)
    finally:
        for member in everyone:
            member.stop()
        server.stop()


def test_kip848_static_member_restart_keeps_its_partitions(server: Standalone) -> None:
    """A KIP-848 static member closing leaves with epoch -2; its next incarnation takes its
    partitions back at once and the group epoch does not move (the other member sees nothing)."""
    topic, group = "kip848-static", "kip848-static"
    create_topic(server.bootstrap, topic, PARTITIONS)

    def member(instance: str) -> Member:
        return Member(
            "confluent-kafka",
            server.bootstrap,
            topic,
            group,
            instance_id=instance,
            protocol="consumer",
        )

    steady = member("steady")
    members = [steady]
    try:
        wait_for(lambda: len(steady.partitions) == PARTITIONS, 60, "alone", members)
        restarting = member("restarting")
        members.append(restarting)
        wait_for(lambda: len(restarting.partitions) == 3, 60, "3 + 3", members)
        before, steady_events = restarting.partitions, len(steady.assignment_events())
        restarting.stop()
        again = member("restarting")
        members.append(again)
        assert wait_for(lambda: again.partitions == before, 30, "back", members) < 5
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 120)
        wait_for(lambda: all_consumed([steady, again], sent), 60, "consumed", members)
        assert len(steady.assignment_events()) == steady_events
        assert_no_duplicates(members)
    finally:
        for m in members:
            m.stop()
