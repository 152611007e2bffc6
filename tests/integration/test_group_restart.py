"""Consumer groups outlive a broker restart: members whose session has not expired carry on.

A standalone is stopped (SIGTERM) or killed (SIGKILL) and started again on the same data dir
and ports while confluent-kafka or Apache Kafka Java consumers (classic protocol, and KIP-848
`group.protocol=consumer`) are in a stable group. Afterwards their heartbeats and commits
succeed with the generation / member epoch they hold: no partition is revoked or reported
lost, no commit fails, nothing is read twice — as with Kafka, which reloads group metadata from
`__consumer_offsets`. Without durable group state each member's next heartbeat is answered
UNKNOWN_MEMBER_ID and every partition is lost and assigned again.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.group_members import Member, create_topic, produce_numbered, wait_for
from tests.support.standalone import Standalone, running_standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4
# Sessions long enough to outlast a restart on a loaded machine; the KIP-848 session is the
# broker's (45 s by default), the classic one the client's.
SESSION_TIMEOUT_MS = 45_000
# The Java client's default metadata recovery (rebootstrap) empties its metadata cache when
# its only broker is gone; a classic-protocol *leader* polling in that window sees its topics'
# partitions "change" and asks for a rebalance itself (ConsumerCoordinator's metadata
# snapshot check, the same against a one-broker Kafka). With several brokers (the cluster
# test) it never re-bootstraps; here it keeps its cache, as it would with any broker left.
JAVA_CLASSIC_CONFIG = {"metadata.recovery.strategy": "none"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One standalone for every case (each stops or kills and restarts it; their topics and
    groups are distinct). KIP-848 members are told to heartbeat every second, as the classic
    ones are configured to, so a few heartbeats after the restart take seconds, not 15."""
    with running_standalone(tmp_path_factory.mktemp("restart") / "data", extra_args=[
            "--group-consumer-heartbeat-interval-ms", "1000"]) as standalone:
        yield standalone


def values_seen(members: list[Member]) -> collections.Counter[str]:
    return collections.Counter(v for m in members for v in m.values())


def commit_failures(members: list[Member]) -> list[dict]:
    return [e for m in members for e in m.snapshot() if e["event"] == "commit_failed"]


@pytest.mark.parametrize(("client", "protocol", "how"), [
    ("confluent-kafka", "classic", "sigterm"),
    ("confluent-kafka", "consumer", "sigterm"),
    ("confluent-kafka", "classic", "kill-9"),
    ("confluent-kafka", "consumer", "kill-9"),
    ("java", "classic", "sigterm"),
    ("java", "consumer", "sigterm"),
])
def test_consumers_keep_their_membership_through_a_restart(
    server: Standalone, client: str, protocol: str, how: str
) -> None:
    if server.proc is None or server.proc.poll() is not None:  # a failed case left it down
        server.start()
    topic = group = f"restart-{client}-{protocol}-{how}"
    create_topic(server.bootstrap, topic, PARTITIONS)
    members = [
        Member(client, server.bootstrap, topic, group, protocol=protocol,
               session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1000,
               java_config=JAVA_CLASSIC_CONFIG if protocol == "classic" else None)
        for _ in range(2)
    ]
    try:
        wait_for(lambda: sorted(p for m in members for p in m.partitions)
                 == list(range(PARTITIONS)) and all(m.partitions for m in members),
                 90, "2 members sharing 4 partitions", members)
        sent = produce_numbered(server.bootstrap, topic, PARTITIONS, 0, 200)
        wait_for(lambda: sent <= set(values_seen(members)), 60, "first 200 consumed", members)
        time.sleep(3)  # heartbeats settle: the group is stable with nothing in flight
        owned_before = [m.partitions for m in members]
        events_before = [len(m.assignment_events()) for m in members]

        if how == "sigterm":
            server.stop()
        else:
            server.kill()
        server.start()
        AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30)

        sent |= produce_numbered(server.bootstrap, topic, PARTITIONS, 200, 200)
        wait_for(lambda: sent <= set(values_seen(members)), 60, "consumed after restart",
                 members)
        time.sleep(4)  # a few heartbeats (every second): a lost member would show now
        assert [m.partitions for m in members] == owned_before, members
        assert [len(m.assignment_events()) for m in members] == events_before, (
            f"a member saw a rebalance after the restart: {members}")
        assert commit_failures(members) == [], members
        twice = [v for v, n in values_seen(members).items() if n > 1]
        assert not twice, f"read twice: {sorted(twice)[:20]}"
    finally:
        for member in members:
            member.stop()
