"""Geo-replication between two ZooKeeper-backed clusters, with a failover of the replicating
broker: "east" (2 brokers) and "west" (1 broker), each with its own bookie and its own
chroot on one real ZooKeeper server, replicating a namespace both ways.

A partition's replicator runs on the broker that owns it.  The east broker owning most of
the topic's partitions is killed (SIGKILL) while idempotent confluent-kafka producers write
to east; the survivor takes its bundles and their replicators, resuming from the durable
checkpoints.  Every message in east must be in west exactly once, in order per partition
(and west's in east); then the killed broker comes back, its bundles are handed back to it
gracefully with their replicators, and what is written afterwards crosses once as well; a
group's offsets committed in east reach west for every partition (each broker replicating
some of them).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from gateway.cli.admin.http_client import call, path
from tests.cluster.cluster_processes import Cluster
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

    def start(self) -> GeoCluster:
        """As Cluster.start, with the brokers started side by side and no `cluster status`
        process polled for the bundles (the test waits for its partitions' leaders)."""
        self.zk.start()
        init = self.cli("cluster", "init", "--bundles", str(self.bundles))
        assert init.returncode == 0, init.stderr
        for _ in range(self._n_bookies):
            self.add_bookie()
        for node_id in range(1, self._n_brokers + 1):
            self.add_broker(node_id, wait=False)
        deadline = time.monotonic() + 120
        for broker in self.brokers.values():
            while broker.ready_text not in broker.log_path.read_bytes():
                assert broker.alive, broker.log()
                assert time.monotonic() < deadline, broker.log()
                time.sleep(0.1)
        return self

    def admin(self, method: str, target: str, body: Any = None) -> Any:
        """An admin API call to broker 1 (as `ledgerwire admin` makes it, without a CLI
        process per call on a loaded machine)."""
        return call(self.admin_url(1), method, target, body)

    def leaders(self) -> dict[int, int]:
        """partition -> the node id Kafka metadata names as its leader (its owner); empty
        while the topic is not known yet where the metadata was asked."""
        meta = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(TOPIC, timeout=10)
        topic = meta.topics.get(TOPIC)
        if topic is None or topic.error is not None:
            return {}
        return {p: info.leader for p, info in topic.partitions.items()}

    def all_led(self) -> bool:
        """Every partition of the topic has a live leader (its bundle is owned)."""
        return self.complete(self.leaders())

    def complete(self, leaders: dict[int, int]) -> bool:
        alive = {node for node, broker in self.brokers.items() if broker.alive}
        return len(leaders) == PARTITIONS and set(leaders.values()) <= alive

    def settled_leaders(self) -> dict[int, int]:
        """The leader of every partition, once one answer names a live leader for each. Asked
        again, a broker that has not yet seen the topic's creation may answer with nothing."""
        seen: dict[int, int] = {}

        def settled() -> bool:
            seen.clear()
            seen.update(self.leaders())
            return self.complete(seen)
        wait_for(settled, "every partition of the topic to have a leader")
        return dict(seen)

    def replicating(self, node_id: int) -> set[int]:
        try:
            return {r["partition"] for r in self.rows(node_id) if r["topic"] == TOPIC}
        except OSError:
            return set()

    def placed(self) -> bool:
        """Each broker runs the replicators of the partitions it leads, and only those."""
        leaders = self.leaders()
        alive = {node for node, broker in self.brokers.items() if broker.alive}
        return len(leaders) == PARTITIONS and set(leaders.values()) <= alive and all(
            self.replicating(node) == {p for p, n in leaders.items() if n == node}
            for node in alive)

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
        starts = [threading.Thread(target=side.start) for side in (east, west)]
        for thread in starts:
            thread.start()
        for thread in starts:
            thread.join()
        for side in (east, west):
            assert side.brokers and all(b.alive for b in side.brokers.values()), side.logs()
        phase("clusters up")
        yield east, west
    finally:
        east.close()
        west.close()
        zk.stop(kill=True)


T0 = time.monotonic()


def phase(what: str) -> None:
    print(f"{time.monotonic() - T0:7.1f} s  {what}", flush=True)


def test_failover_of_the_replicating_broker_loses_and_duplicates_nothing(
        clusters: tuple[GeoCluster, GeoCluster]) -> None:
    east, west = clusters
    for side in (east, west):
        side.admin("PUT", path("tenants", "geo"), {"allowed_principals": []})
        side.admin("PUT", path("namespaces", "geo", "ns"),
                   {"policies": {"replication_clusters": "east,west"}})
    east.admin("PUT", path("topics", TOPIC), {"partitions": PARTITIONS, "configs": {},
                                              "namespace": None})
    phase("topic created")
    victim = Counter(east.settled_leaders().values()).most_common(1)[0][0]
    survivor = next(i for i in east.brokers if i != victim)
    # west knows both east brokers, the victim first: it passes over it once it is gone
    east.admin("PUT", path("clusters", "west"), {"kafka": west.bootstrap})
    west.admin("PUT", path("clusters", "east"), {"kafka": ",".join(
        f"127.0.0.1:{east.broker_ports[node]}" for node in (victim, survivor))})
    # each east broker replicates the partitions it owns, and only those
    wait_for(east.placed, "each east broker to run the replicators of its partitions")
    wait_for(lambda: TOPIC in AdminClient({"bootstrap.servers": west.bootstrap}).list_topics(
        timeout=10).topics, "the topic to be created in west by east's replicators")
    wait_for(west.placed, "west to run the replicators of its partitions")

    phase("replicators placed")
    in_west = ProduceRun(west.bootstrap, TOPIC, "w", rate_per_s=100).start()
    run = ProduceRun(east.bootstrap, TOPIC, "e", rate_per_s=200).start()
    try:
        wait_for(lambda: len(run.acked) >= 300, "300 acknowledged in east")
        victim_rows = lambda: [r for r in east.rows(victim) if r["topic"] == TOPIC]  # noqa: E731
        wait_for(lambda: sum(r["sent_total"] for r in victim_rows()) >= 100,
                 "the victim to replicate mid-stream")
        phase("kill")
        killed_at = time.monotonic()
        east.brokers[victim].kill()
        wait_for(lambda: run.acked_since(killed_at) >= 300, "300 more acknowledged in east",
                 timeout_s=120)
    finally:
        run.stop()
        in_west.stop()
    assert not run.errors and not in_west.errors, (run.errors[:3], in_west.errors[:3])
    phase("produce stopped")
    everything = set(range(PARTITIONS))
    wait_for(lambda: east.drained(survivor, everything), "the survivor to replicate everything",
             timeout_s=120)
    wait_for(lambda: west.drained(1, everything), "west to drain", timeout_s=120)
    phase("drained")
    from_east, from_west = read_all(east, TOPIC, PARTITIONS), read_all(west, TOPIC, PARTITIONS)
    phase("read")
    assert {(m.value or b"").decode() for m in from_east if m.origin is None} >= set(run.acked)
    assert_replicated(from_east, from_west, "east", PARTITIONS)
    assert_replicated(from_west, from_east, "west", PARTITIONS)

    # the victim comes back; its bundles (and their replicators) are handed back gracefully
    east.add_broker(victim)
    phase("victim back")
    wait_for(lambda: east.all_led() and set(east.leaders().values()) == set(east.brokers)
             and east.placed(),
             "bundles handed back to the victim, with their replicators")
    phase("handed back")
    after = ProduceRun(east.bootstrap, TOPIC, "after", rate_per_s=200).start()
    try:
        wait_for(lambda: len(after.acked) >= 200, "200 acknowledged after the hand-back")
    finally:
        after.stop()
    assert not after.errors, after.errors[:3]
    phase("produced after")
    leaders = east.settled_leaders()
    wait_for(lambda: all(east.drained(node, {p for p, n in leaders.items() if n == node})
                         for node in east.brokers), "east to drain again", timeout_s=120)
    from_east, from_west = read_all(east, TOPIC, PARTITIONS), read_all(west, TOPIC, PARTITIONS)
    assert_replicated(from_east, from_west, "east", PARTITIONS)

    # a group commits in east; the broker coordinating it pushes its offsets to west for every
    # partition, those another broker replicates included
    group = {"bootstrap.servers": east.bootstrap, "group.id": "geo-movers"}
    consumer = Consumer(group)
    try:
        ends = [TopicPartition(TOPIC, p, consumer.get_watermark_offsets(
            TopicPartition(TOPIC, p), timeout=10, cached=False)[1]) for p in range(PARTITIONS)]
        consumer.commit(offsets=ends, asynchronous=False)
    finally:
        consumer.close()
    moved = Consumer({**group, "bootstrap.servers": west.bootstrap})
    try:
        wanted = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        wait_for(lambda: all(tp.offset > 0 for tp in moved.committed(wanted, timeout=10)),
                 "the group's offsets of every partition to be pushed to west")
    finally:
        moved.close()
