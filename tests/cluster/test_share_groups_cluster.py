"""Kafka share groups in a cluster: the owner broker of the share partition is killed with
kill -9 in the middle of the group's work, and later comes back and takes its bundles again.

A real cluster (ZooKeeper, 3 bookies, 2 brokers as processes) and two Java 4.3
KafkaShareConsumers in one share group on a one-partition topic. The survivor takes the
partition, loads the delivery state the dead owner persisted (fencing its log), and serves
the consumers, which carry on without a restart of their own; when the killed broker returns,
the survivor unloads the state and hands the partition back. Afterwards every record was
accepted (but three released at every delivery, which end in the group's dead-letter
topic), and no record whose acceptance the cluster confirmed (a commitSync without error)
was delivered again: every delivery of a record has a higher delivery count than the one
before it, so no delivery may carry a higher count than a confirmed acceptance.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster_processes import Cluster
from tests.support.java_clients import run_java, start_java

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 600
TOPIC, GROUP = "share-failover", "share-failover-g"
DEAD = (7, 300, 550)  # released at every delivery: they go to the dead-letter topic


class Consumer:
    """A KafkaShareConsume process and the events it printed so far."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        assert proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def confirmed(self) -> dict[int, int]:
        """offset -> delivery count of each acceptance whose commitSync had no error."""
        out: dict[int, int] = {}
        pending: list[tuple[int, int]] = []
        for e in list(self.events):
            if e.get("event") == "record" and e["action"] == "accept":
                pending.append((e["offset"], e["delivery_count"]))
            elif e.get("event") == "commit":
                if not e["errors"]:
                    out.update(pending)
                pending = []
        return out

    def finish(self, timeout_s: float) -> str:
        self.proc.wait(timeout=timeout_s)
        return self.close()

    def close(self) -> str:
        """Reap the process and close its pipes; its stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        errors = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return errors


def unconfirmed_at_limit(consumers: list[Consumer], limit: int) -> set[int]:
    """Offsets delivered `limit` times whose acceptance no consumer had confirmed."""
    confirmed = {o for c in consumers for o in c.confirmed()}
    return {e["offset"] for c in consumers for e in c.events
            if e.get("event") == "record" and e["delivery_count"] >= limit
            and e["offset"] not in confirmed}


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_owner_killed_mid_work_loses_nothing_and_redelivers_nothing_accepted(
    tmp_path: Path,
) -> None:
    with Cluster(tmp_path / "cluster", bookies=3, brokers=2) as cluster:
        run_java("KafkaAdmin", bootstrap=cluster.bootstrap, op="create_topics", topics=TOPIC,
                 partitions=1)
        produced = run_java("KafkaProduce", bootstrap=cluster.bootstrap, topic=TOPIC,
                            count=COUNT)
        assert produced.one("done")["count"] == COUNT
        owner = cluster.partition_owner(TOPIC, 0)
        assert owner is not None
        bootstrap = cluster.bootstrap
        # the dead-letter topic's partition on the other broker: copies go over the wire
        # (before the kill and after the return) and locally (while one broker serves all)
        dead_topic = next(name for name in (f"share-failover-dlq-{i}" for i in range(64))
                          if cluster.partition_owner(name, 0) not in (None, owner))
        configs = ("share.auto.offset.reset=earliest;share.record.lock.duration.ms=5000;"
                   f"share.delivery.count.limit=2;share.dead.letter.topic={dead_topic}")
        consumers: list[Consumer] = []
        try:
            for i in range(2):  # the first sets the group's configs before either fetches
                consumers.append(Consumer(start_java(
                    "KafkaShareConsume", bootstrap=bootstrap, topic=TOPIC, group=GROUP,
                    count=COUNT, timeout_ms=240_000, idle_ms=40_000, sleep_ms=200,
                    release=",".join(map(str, DEAD)), release_all="true",
                    group_configs=configs if i == 0 else "",
                    kafka={"max.poll.records": "5"})))
                wait_until(lambda: any(e.get("event") == "ready" for e in consumers[-1].events),
                           90, "the consumer subscribed")

            def accepted() -> int:
                return len({o for c in consumers for o in c.confirmed()})

            wait_until(lambda: accepted() >= COUNT // 4, 150, "a quarter accepted")
            cluster.brokers[owner].kill()  # SIGKILL: no hand-off, the survivor fences
            at_kill = accepted()
            assert at_kill < COUNT // 2, "the owner was killed in the middle of the work"
            survivor = next(i for i in cluster.brokers if i != owner)
            cluster.wait_all_bundles_owned(timeout_s=90, by={survivor})
            wait_until(lambda: accepted() >= at_kill + COUNT // 4, 150,
                       "work going on after the failover")
            cluster.add_broker(owner)  # it comes back: the survivor hands the partition back
            wait_until(lambda: cluster.partition_owner(TOPIC, 0) == owner, 90,
                       "the partition handed back")
            for c in consumers:
                errors = c.finish(300)
                assert c.proc.returncode == 0, errors[-4000:]
            # the dead-letter topic holds the released ones, and may hold a record whose
            # acceptance at its last allowed delivery was never confirmed (the commit failed
            # as the partition moved: at-least-once, then the delivery count limit)
            archivable = set(DEAD) | unconfirmed_at_limit(consumers, limit=2)
            copies = run_java("KafkaConsume", bootstrap=cluster.bootstrap, topics=dead_topic,
                              count=len(archivable), timeout_ms=60_000,
                              check=False).events("record")
        finally:
            for i, c in enumerate(consumers):  # kept beside the cluster's logs
                errors = c.close() if not (c.proc.stderr and c.proc.stderr.closed) else ""
                (tmp_path / f"consumer-{i}.log").write_text(
                    errors + "".join(json.dumps(e) + "\n" for e in c.events))
            logs = cluster.logs()

    events = [e for c in consumers for e in c.events]
    deliveries: dict[int, list[int]] = {}
    for e in events:
        if e.get("event") == "record":
            deliveries.setdefault(e["offset"], []).append(e["delivery_count"])
    confirmed: dict[int, int] = {}
    for c in consumers:
        for offset, count in c.confirmed().items():
            assert offset not in confirmed, f"offset {offset} accepted twice with success"
            confirmed[offset] = count
    again = {o: counts for o, counts in deliveries.items()
             if o in confirmed and max(counts) > confirmed[o]}
    assert again == {}, "a confirmed acceptance was delivered again"
    accepted_ever = {e["offset"] for e in events
                     if e.get("event") == "record" and e["action"] == "accept"}
    expected = set(range(COUNT)) - set(DEAD)
    assert accepted_ever == expected, (
        f"every record accepted (missing {sorted(expected - accepted_ever)[:20]})\n"
        + logs[-6000:])
    # each released one was delivered at most twice, then copied (a crash may copy it twice);
    # nothing whose acceptance was confirmed is ever copied
    copied = {int(dict(c["headers"])["dlq.offset"]) for c in copies}
    assert set(DEAD) <= copied <= archivable, (sorted(copied), sorted(archivable))
    assert not copied & set(confirmed), sorted(copied & set(confirmed))
    assert all(max(deliveries[o]) <= 2 for o in DEAD), {o: deliveries[o] for o in DEAD}
    assert sum(1 for e in events if e.get("event") == "record") >= COUNT
    assert all(len(set(counts)) == len(counts) for counts in deliveries.values()), (
        "each delivery of a record has its own delivery count")
