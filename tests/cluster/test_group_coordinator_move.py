"""A consumer group's coordinator moves to another broker and its members notice nothing.

A real cluster (ZooKeeper, 3 bookies, 2 brokers as processes); two confluent-kafka consumers
(classic protocol, and KIP-848) or two Java consumers with their defaults in a stable group;
the broker coordinating the group is stopped (SIGTERM) or killed (SIGKILL). The survivor
takes the coordinator partition, loads the group from its ledger, and the members'
heartbeats and commits go on with the generation or member epoch they hold: no partition
revoked or lost, no commit failed, nothing read twice. Without durable group state the new
coordinator answers UNKNOWN_MEMBER_ID and every member rejoins.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.ownership import GROUP_TOPIC, bundle_of, coordinator_partition
from tests.cluster.cluster_processes import Cluster
from tests.support.group_members import Member, create_topic, produce_numbered, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4


def coordinator_of(cluster: Cluster, group: str) -> int | None:
    """The broker owning the group's coordinator partition (cluster init's default layout)."""
    partition = coordinator_partition(group, ClusterLayout().group_partitions)
    return cluster.bundle_owners().get(bundle_of(GROUP_TOPIC, partition, cluster.bundles))


def values_seen(members: list[Member]) -> collections.Counter[str]:
    return collections.Counter(v for m in members for v in m.values())


@pytest.mark.parametrize(("client", "protocol", "how"), [
    ("confluent-kafka", "classic", "sigterm"),
    ("confluent-kafka", "consumer", "sigterm"),
    ("confluent-kafka", "classic", "kill-9"),
    ("java", "classic", "sigterm"),  # Java's defaults: with two brokers it never rebootstraps
])
def test_members_carry_on_when_their_coordinator_moves(
    tmp_path: Path, client: str, protocol: str, how: str
) -> None:
    topic = group = f"move-{client}-{protocol}-{how}"
    # Broker-side KIP-848 heartbeats every second, so members notice the move promptly.
    with Cluster(tmp_path / "cluster", bookies=3, brokers=2, broker_args=[
            "--group-consumer-heartbeat-interval-ms", "1000"]) as cluster:
        create_topic(cluster.bootstrap, topic, PARTITIONS)
        bootstrap = cluster.bootstrap
        members = [Member(client, bootstrap, topic, group, protocol=protocol,
                          session_timeout_ms=45_000, heartbeat_interval_ms=1000)
                   for _ in range(2)]
        try:
            wait_for(lambda: sorted(p for m in members for p in m.partitions)
                     == list(range(PARTITIONS)) and all(m.partitions for m in members),
                     90, "2 members sharing 4 partitions", members)
            sent = produce_numbered(bootstrap, topic, PARTITIONS, 0, 200)
            wait_for(lambda: sent <= set(values_seen(members)), 60, "first 200", members)
            time.sleep(3)
            owned_before = [m.partitions for m in members]
            events_before = [len(m.assignment_events()) for m in members]

            victim = coordinator_of(cluster, group)
            assert victim is not None
            survivor = next(i for i in cluster.brokers if i != victim)
            if how == "sigterm":
                cluster.brokers[victim].stop()
            else:
                cluster.brokers[victim].kill()
            cluster.wait_all_bundles_owned(timeout_s=90, by={survivor})
            survivor_bootstrap = f"127.0.0.1:{cluster.broker_ports[survivor]}"
            assert coordinator_of(cluster, group) == survivor

            sent |= produce_numbered(survivor_bootstrap, topic, PARTITIONS, 200, 200)
            wait_for(lambda: sent <= set(values_seen(members)), 90, "consumed after the move",
                     members)
            time.sleep(5)  # several heartbeats with the new coordinator
            assert [m.partitions for m in members] == owned_before, members
            assert [len(m.assignment_events()) for m in members] == events_before, (
                f"a member saw a rebalance after the move: {members}")
            failed = [e for m in members for e in m.snapshot() if e["event"] == "commit_failed"]
            assert failed == [], members
            twice = [v for v, n in values_seen(members).items() if n > 1]
            assert not twice, f"read twice: {sorted(twice)[:20]}"
        finally:
            for member in members:
                member.stop()
