"""Geo-replication between two ZooKeeper-backed clusters, with a failover of the replicating
broker: "east" (2 brokers) and "west" (1 broker), each with its own bookie and its own
chroot on one real ZooKeeper server, replicating a namespace both ways.

A partition's replicator runs on the broker that owns it.  The east broker owning most of
the topic's partitions is killed (SIGKILL) while idempotent confluent-kafka producers write
to east; the survivor takes its bundles and their replicators, resuming from the durable
checkpoints.  Every message in east must be in west exactly once, in order per partition
(and west's in east); then the killed broker comes back, its bundles are handed back to it
gracefully with their replicators, and what is written afterwards crosses once as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.cluster.cluster_processes import REPO, Cluster
from tests.cluster.kafka_workload import ProduceRun
from tests.replication.geo_pair import assert_replicated, read_all, wait_for
from tests.support.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "geo.ns.failover"
PARTITIONS = 4


class GeoCluster(Cluster):
    """A test cluster named for geo-replication, in its own chroot of a shared ZooKeeper."""

    def __init__(self, base: Path, name: str, zk: ZooKeeperServer, brokers: int) -> None:
        super().__init__(base, bookies=1, brokers=brokers, quorum=(1, 1, 1), bundles=8,
                         broker_args=["--cluster-name", name])
        self.name = name
        self.zk = zk

    @property
    def metadata_url(self) -> str:
        return self.zk.store_url(f"/geo-{self.name}", session_timeout_s=self.session_timeout_s)

    def close(self) -> None:  # the shared ZooKeeper is stopped by its owner
        for p in [*self.brokers.values(), *self.bookies]:
            p.kill()

    def admin(self, node_id: int, *args: str) -> Any:
        done = subprocess.run([sys.executable, "-m", "gateway", "admin", *args, "--admin-url",
                               self.admin_url(node_id), "--json"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def rows(self, node_id: int) -> list[dict[str, Any]]:
        """This broker's replicators (GET /admin/v1/replication)."""
        url = f"{self.admin_url(node_id)}/admin/v1/replication"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return list(json.load(answer)["partitions"])

    def drained(self, node_id: int, partitions: set[int]) -> bool:
        try:
            rows = [r for r in self.rows(node_id) if r["topic"] == TOPIC]
        except OSError:
            return False
        return ({r["partition"] for r in rows} == partitions
                and all(r["state"] == "idle" and r["backlog_messages"] == 0 for r in rows))


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GeoCluster, GeoCluster]]:
    base = tmp_path_factory.mktemp("geo-clusters")
    zk = ZooKeeperServer(base / "zk")
    zk.start()
    east = GeoCluster(base / "east", "east", zk, brokers=2)
    west = GeoCluster(base / "west", "west", zk, brokers=1)
    try:
        east.start()
        west.start()
        yield east, west
    finally:
        east.close()
        west.close()
        zk.stop(kill=True)


def owners(cluster: GeoCluster) -> dict[int, int | None]:
    return {p: cluster.partition_owner(TOPIC, p) for p in range(PARTITIONS)}


def test_failover_of_the_replicating_broker_loses_and_duplicates_nothing(
        clusters: tuple[GeoCluster, GeoCluster]) -> None:
    east, west = clusters
    for side in (east, west):
        side.admin(1, "tenants", "create", "geo")
        side.admin(1, "namespaces", "create", "geo/ns", "--policy",
                   "replication_clusters=east,west")
    east.admin(1, "topics", "create", TOPIC, "--partitions", str(PARTITIONS))
    placed = owners(east)
    victim = Counter(placed.values()).most_common(1)[0][0]
    assert victim is not None
    survivor = next(i for i in east.brokers if i != victim)
    # west reaches east through the broker that stays up; east reaches west's only broker
    east.admin(1, "clusters", "add", "west", "--kafka", f"127.0.0.1:{west.broker_ports[1]}")
    west.admin(1, "clusters", "add", "east", "--kafka",
               f"127.0.0.1:{east.broker_ports[survivor]}")
    wait_for(lambda: TOPIC in AdminClient({"bootstrap.servers": west.bootstrap}).list_topics(
        timeout=10).topics, "the topic to be created in west by east's replicators")
    # each east broker replicates the partitions it owns, and only those
    for node in east.brokers:
        mine = {p for p, owner in placed.items() if owner == node}
        wait_for(lambda node=node, mine=mine: {  # type: ignore[misc]
            r["partition"] for r in east.rows(node) if r["topic"] == TOPIC} == mine,
            f"east broker {node} to run the replicators of {mine}")

    in_west = ProduceRun(west.bootstrap, TOPIC, "w", rate_per_s=100).start()
    run = ProduceRun(east.bootstrap, TOPIC, "e", rate_per_s=200).start()
    try:
        wait_for(lambda: len(run.acked) >= 300, "300 acknowledged in east")
        victim_rows = lambda: [r for r in east.rows(victim) if r["topic"] == TOPIC]  # noqa: E731
        wait_for(lambda: sum(r["sent_total"] for r in victim_rows()) >= 100,
                 "the victim to replicate mid-stream")
        killed_at = time.monotonic()
        east.brokers[victim].kill()
        wait_for(lambda: run.acked_since(killed_at) >= 300, "300 more acknowledged in east",
                 timeout_s=120)
    finally:
        run.stop()
        in_west.stop()
    assert not run.errors and not in_west.errors, (run.errors[:3], in_west.errors[:3])
    everything = set(range(PARTITIONS))
    wait_for(lambda: east.drained(survivor, everything), "the survivor to replicate everything",
             timeout_s=120)
    wait_for(lambda: west.drained(1, everything), "west to drain", timeout_s=120)
    from_east, from_west = read_all(east, TOPIC, PARTITIONS), read_all(west, TOPIC, PARTITIONS)
    assert {m.value.decode() for m in from_east if m.origin is None} >= set(run.acked)
    assert_replicated(from_east, from_west, "east", PARTITIONS)
    assert_replicated(from_west, from_east, "west", PARTITIONS)

    # the victim comes back; its bundles (and their replicators) are handed back gracefully
    east.add_broker(victim)
    for node in east.brokers:
        wait_for(lambda node=node: {  # type: ignore[misc]
            r["partition"] for r in east.rows(node) if r["topic"] == TOPIC} == {
            p for p, owner in owners(east).items() if owner == node},
            f"east broker {node} to run the replicators of its partitions again")
    after = ProduceRun(east.bootstrap, TOPIC, "after", rate_per_s=200).start()
    try:
        wait_for(lambda: len(after.acked) >= 200, "200 acknowledged after the hand-back")
    finally:
        after.stop()
    assert not after.errors, after.errors[:3]
    wait_for(lambda: all(east.drained(node, {p for p, o in owners(east).items() if o == node})
                         for node in east.brokers), "east to drain again", timeout_s=120)
    from_east, from_west = read_all(east, TOPIC, PARTITIONS), read_all(west, TOPIC, PARTITIONS)
    assert_replicated(from_east, from_west, "east", PARTITIONS)
