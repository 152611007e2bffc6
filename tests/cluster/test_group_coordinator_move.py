"""A consumer group's coordinator moves to another broker and its members notice nothing.

A real cluster (ZooKeeper, 3 bookies, 2 brokers as processes); two confluent-kafka consumers
(classic protocol, and KIP-848) or two Java consumers with their defaults in a stable group;
the broker coordinating the group is stopped (SIGTERM) or killed (SIGKILL). The survivor
takes the coordinator partition, loads the group from its ledger, and the members'
heartbeats and commits go on with the generation or member epoch they hold: no partition
revoked or lost, no commit failed, nothing read twice. Without durable group state the new
coordinator answers UNKNOWN_MEMBER_ID and every member rejoins.

The tests share one cluster (starting one is most of a test's cost): each starts with both
brokers up and the bundles shared as a fresh cluster shares them, restarting the broker the
test before stopped and waiting for its share to be handed back (no hand-back delay here).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator

import pytest

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import (
    GROUP_TOPIC,
    bundle_of,
    coordinator_partition,
    target_broker,
)
from tests.cluster.cluster_processes import Cluster
from tests.support.group_members import Member, create_topic, produce_numbered, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4
BROKERS = 2


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Broker-side KIP-848 heartbeats every second, so members notice the move promptly.
    with Cluster(tmp_path_factory.mktemp("cluster"), bookies=3, brokers=BROKERS, broker_args=[
            "--group-consumer-heartbeat-interval-ms", "1000"]) as cluster:
        yield cluster


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """The shared cluster with both brokers up and each bundle on its target broker."""
    for node_id, broker in shared_cluster.brokers.items():
        if not broker.alive:
            shared_cluster.add_broker(node_id)  # same id, ports and data dir; waits until ready
    brokers = sorted(shared_cluster.brokers)
    expected = {b: target_broker(b, brokers) for b in range(shared_cluster.bundles)}
    deadline = time.monotonic() + 90
    while (owners := shared_cluster.bundle_owners()) != expected:
        assert time.monotonic() < deadline, f"bundles not shared back: {owners}"
        time.sleep(0.3)
    return shared_cluster


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
    cluster: Cluster, client: str, protocol: str, how: str
) -> None:
    topic = group = f"move-{client}-{protocol}-{how}"
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
