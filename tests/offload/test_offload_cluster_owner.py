"""In a cluster only a partition's owner offloads it, and a deposed owner cannot.

Two `ledgerwire broker` processes on a real ZooKeeper, three bookies, one shared offload
directory (an NFS mount's stand-in), a threshold of 0 (a ledger is offloaded as soon as it
closes) and a pass a second. confluent-kafka writes a topic of small ledgers while:

1. both brokers own partitions: each ledger's offload is logged by its partition's owner only;
2. broker 2 is SIGSTOPped mid-stream (its ZooKeeper session ends, broker 1 takes its bundles
   and keeps offloading them), then SIGCONTed: it wakes with a stale view of partitions it no
   longer owns, registers again and gets its share back;
3. broker 2, alive and with a live session, is drained (`ledgerwire admin drain 2`) while the
   topic is written: it offloads nothing after, broker 1 offloads everything.

In the end every ledger was offloaded once, by one broker, with exactly one object in the
directory and no object nobody references, and every record reads back byte-identical.
"""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ledger_backend.managed_ledger.metadata_format import decode_name
from tests.cluster.cluster_processes import Cluster
from tests.support.kafka_records import position

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "owned"
PARTITIONS = 4
OFFLOADED = re.compile(rb"managed ledger '([^']+)': ledger (\d+) offloaded to filesystem '([^']+)'")


def offloads_by_broker(cluster: Cluster) -> dict[int, list[tuple[str, int, str]]]:
    """(managed ledger, ledger id, key) of every offload each broker logged."""
    return {node: [(m[1].decode(), int(m[2]), m[3].decode())
                   for m in OFFLOADED.finditer(proc.log_path.read_bytes())]
            for node, proc in cluster.brokers.items()}


def objects(tier: Path) -> list[tuple[str, int, str]]:
    return [(decode_name(p.parent.name), int(p.name.split("-", 1)[0]),
             f"{p.parent.name}/{p.name}") for p in tier.rglob("*.lwo")]


def wait_for(what, timeout_s: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


class Writer:
    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.sent: dict[tuple[int, int], bytes] = {}
        self.errors: list[object] = []
        self.count = 0

    def write(self, n: int) -> None:
        def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors.append(err)
            else:
                self.sent[(msg.partition(), msg.offset())] = msg.value()

        for _ in range(n):
            self.producer.produce(TOPIC, value=b"%06d-" % self.count + bytes(300),
                                  partition=self.count % PARTITIONS, on_delivery=delivered)
            self.count += 1
            if self.count % 100 == 0:
                self.producer.flush(120)
        assert self.producer.flush(120) == 0


@pytest.mark.timeout(600)
def test_only_the_owner_offloads_and_a_deposed_owner_cannot(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    config = tmp_path / "offload.toml"
    config.write_text(f'[offload]\ndriver = "filesystem"\ndirectory = "{tier}"\n'
                      "threshold_mb = 0\ndeletion_lag_s = 0\ninterval_s = 1\n")
    config.chmod(0o600)
    with Cluster(tmp_path / "cluster", bookies=3, brokers=2, partitions=PARTITIONS,
                 broker_args=["--config", str(config)]) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "segment.bytes": "32768"})])[TOPIC].result(60)
        owners: dict[int, int | None] = {}

        def both_own() -> bool:  # broker 2 may register after broker 1 took every bundle
            owners.update({p: cluster.partition_owner(TOPIC, p) for p in range(PARTITIONS)})
            return set(owners.values()) == {1, 2}

        wait_for(both_own, 60)  # (rendezvous splits this topic's partitions 2 / 2)
        writer = Writer(cluster.bootstrap)

        # 1: both own partitions; each offloads its own
        writer.write(2000)
        names = {f"public/default/{TOPIC}-{p}": p for p in range(PARTITIONS)}
        wait_for(lambda: {names[ml] for ml, _, _ in objects(tier) if ml in names}
                 == set(range(PARTITIONS)))
        for node, done in offloads_by_broker(cluster).items():
            assert done, f"broker {node} offloaded nothing"
            assert all(owners[names[ml]] == node for ml, _, _ in done), (node, owners, done)

        # 2: broker 2 stopped while it offloads: broker 1 takes its partitions over
        cluster.brokers[2].signal(signal.SIGSTOP)
        cluster.wait_all_bundles_owned(by={1})
        writer.write(2000)
        before = len(offloads_by_broker(cluster)[1])
        wait_for(lambda: len(offloads_by_broker(cluster)[1]) > before + PARTITIONS)
        cluster.brokers[2].signal(signal.SIGCONT)  # its passes wake with a stale view
        writer.write(1000)
        cluster.wait_all_bundles_owned()
        time.sleep(3)  # passes on both brokers, whoever owns what now

        # 3: broker 2, alive with a live session, is drained while it offloads: from then on
        # it offloads nothing, broker 1 does it all
        writer.write(500)
        drain = cluster.cli("admin", "drain", "2", "--wait", "60")
        assert drain.returncode == 0, drain.stdout + drain.stderr
        assert set(cluster.bundle_owners().values()) == {1}
        by_2 = len(offloads_by_broker(cluster)[2])
        before = len(offloads_by_broker(cluster)[1])
        writer.write(1500)
        wait_for(lambda: len(offloads_by_broker(cluster)[1]) > before + PARTITIONS)
        time.sleep(3)
        assert len(offloads_by_broker(cluster)[2]) == by_2, "a drained broker offloaded"
        assert writer.errors == []

        # every ledger offloaded once, by one broker; one object each, none unreferenced.  A
        # pass may still be between writing an object and logging it: wait (2 min at most) until
        # the objects and the logged offloads name the same ledgers, then check
        def logged_ledgers() -> list[tuple[str, int]]:
            return sorted((ml, ledger) for done in offloads_by_broker(cluster).values()
                          for ml, ledger, _ in done if ml in names)

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sorted(
                (ml, ledger) for ml, ledger, _ in objects(tier) if ml in names) != logged_ledgers():
            time.sleep(0.3)
        logged = [(ml, ledger, key) for done in offloads_by_broker(cluster).values()
                  for ml, ledger, key in done if ml in names]
        per_ledger: dict[tuple[str, int], list[str]] = defaultdict(list)
        for ml, ledger, key in logged:
            per_ledger[(ml, ledger)].append(key)
        assert all(len(keys) == 1 for keys in per_ledger.values()), per_ledger
        on_disk = sorted(o for o in objects(tier) if o[0] in names)
        assert sorted((ml, ledger) for ml, ledger, _ in on_disk) == sorted(per_ledger)
        assert sorted(key for _, _, key in on_disk) == sorted(k for k, in per_ledger.values())

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 120
        while len(got) < len(writer.sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got[position(msg)] = msg.value() or b""
        consumer.close()
        assert got == writer.sent
