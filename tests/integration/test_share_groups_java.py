"""KIP-932 share groups with Apache Kafka's Java client 4.3 (KafkaShareConsumer and Admin)
against `ledgerwire standalone`: several consumers share one partition and accept every record
exactly once; released records come back with a higher delivery count, rejected ones never; a
consumer killed while it holds records loses them to the others after the lock duration; the
delivery-count limit archives; read_committed skips aborted transactions; the admin calls.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.java_clients import JavaServer, parse_lines, run_java, start_java
from tests.support.standalone import Standalone, running_standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EARLIEST = "share.auto.offset.reset=earliest"


def produce(server: Standalone, topic: str, count: int, partitions: int = 1) -> None:
    if partitions > 1:
        run_java("KafkaAdmin", bootstrap=server.bootstrap, op="create_topics", topics=topic,
                 partitions=partitions)
    run = run_java("KafkaProduce", bootstrap=server.bootstrap, topic=topic, count=count)
    assert run.one("done")["count"] == count


def share_consume(server: Standalone, topic: str, group: str, count: int,
                  configs: str = EARLIEST, timeout_ms: int = 60_000, **named: Any) -> list[dict]:
    run = run_java("KafkaShareConsume", bootstrap=server.bootstrap, topic=topic, group=group,
                   count=count, timeout_ms=timeout_ms, group_configs=configs,
                   timeout=timeout_ms / 1000 + 90, **named)
    assert run.one("done")
    for commit in run.events("commit"):
        assert commit["errors"] == [], run.stdout
    return run.events("record")


def start_share_consumer(server: Standalone, topic: str, group: str, count: int,
                         configs: str = EARLIEST, timeout_ms: int = 60_000,
                         **named: Any) -> subprocess.Popen[str]:
    return start_java("KafkaShareConsume", bootstrap=server.bootstrap, topic=topic, group=group,
                      count=count, timeout_ms=timeout_ms, group_configs=configs, **named)


def finish(proc: subprocess.Popen[str], timeout_s: float = 150) -> list[dict]:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err[-4000:]
    return parse_lines(out)


def wait_for_members(server: Standalone, group: str, count: int, timeout_s: float = 90) -> None:
    """Poll the admin API until the share group has `count` members (each joined with a
    heartbeat), so records produced next are shared between them."""
    url = f"http://127.0.0.1:{server.admin_port}/admin/v1/groups/{group}"
    deadline = time.monotonic() + timeout_s
    described: dict = {}
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                described = json.load(answer)
        except urllib.error.HTTPError:  # not known yet
            described = {}
        if described.get("members") == count:
            return
        time.sleep(0.2)
    raise AssertionError(f"share group {group} has not {count} members: {described}")


def test_three_consumers_accept_every_record_exactly_once(module_standalone: Standalone) -> None:
    topic, group = "share-three", "share-three-g"
    run_java("KafkaAdmin", bootstrap=module_standalone.bootstrap, op="create_topics",
             topics=topic, partitions=1)  # the topic exists before the consumers subscribe
    procs = [start_share_consumer(module_standalone, topic, group, 300, timeout_ms=120_000,
                                  idle_ms=10_000, sleep_ms=100,
                                  kafka={"max.poll.records": "10"})
             for _ in range(3)]
    for proc in procs:  # every consumer subscribed before the records arrive
        assert proc.stdout is not None and '"ready"' in proc.stdout.readline()
    wait_for_members(module_standalone, group, 3)
    produce(module_standalone, topic, 300)
    outputs = [finish(p) for p in procs]
    accepted = Counter(r["offset"] for out in outputs for r in out
                       if r.get("event") == "record" and r["action"] == "accept")
    assert sorted(accepted) == list(range(300))
    assert set(accepted.values()) == {1}, "no record accepted twice"
    busy = [sum(1 for r in out if r.get("event") == "record") for out in outputs]
    assert sum(1 for b in busy if b) >= 2, f"records shared between consumers: {busy}"


def test_release_comes_back_and_reject_never(module_standalone: Standalone) -> None:
    topic, group = "share-ack-types", "share-ack-types-g"
    produce(module_standalone, topic, 10)
    records = share_consume(module_standalone, topic, group, 9, release="3,4", reject="7")
    by_offset: dict[int, list[tuple[int, str]]] = {}
    for r in records:
        by_offset.setdefault(r["offset"], []).append((r["delivery_count"], r["action"]))
    assert by_offset[3] == [(1, "release"), (2, "accept")]
    assert by_offset[4] == [(1, "release"), (2, "accept")]
    assert by_offset[7] == [(1, "reject")]
    assert all(v == [(1, "accept")] for o, v in by_offset.items() if o not in (3, 4, 7))
    assert sorted(by_offset) == list(range(10))
    with urllib.request.urlopen(f"http://127.0.0.1:{module_standalone.admin_port}/metrics",
                                timeout=30) as answer:
        metrics = answer.read().decode()
    labels = f'group="{group}",partition="0",topic="{topic}"'
    assert f"ledgerwire_share_released_records_total{{{labels}}} 2.0" in metrics
    assert f"ledgerwire_share_rejected_records_total{{{labels}}} 1.0" in metrics
    assert f"ledgerwire_share_redelivered_records_total{{{labels}}} 2.0" in metrics
    listed = module_standalone.admin("groups", "list")
    assert {"group": group, "state": "Empty", "members": 0, "protocol_type": "share"} in listed
    described = module_standalone.admin("groups", "describe", group)
    [part] = described["partitions"]
    assert (part["start_offset"], part["in_flight"], part["lag"]) == (10, 0, 0), described


def test_killed_consumer_records_go_to_others_after_the_lock(
    module_standalone: Standalone,
) -> None:
    topic, group = "share-kill", "share-kill-g"
    configs = f"{EARLIEST};share.record.lock.duration.ms=3000"
    produce(module_standalone, topic, 20)
    holder = start_share_consumer(module_standalone, topic, group, 1, configs=configs,
                                  hold="true", timeout_ms=120_000)
    assert holder.stdout is not None
    held = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not held:
        line = holder.stdout.readline()
        if '"record"' in line:
            held.append(line)
    assert held, "the holder got records"
    holder.kill()
    holder.communicate()
    started = time.monotonic()
    records = share_consume(module_standalone, topic, group, 20, configs=configs,
                            timeout_ms=60_000)
    accepted = [r for r in records if r["action"] == "accept"]
    assert sorted(r["offset"] for r in accepted) == list(range(20))
    assert any(r["delivery_count"] == 2 for r in accepted), "the held records were redelivered"
    assert time.monotonic() - started >= 2.0, "not before the lock expired"


def test_delivery_count_limit_archives(module_standalone: Standalone) -> None:
    topic, group = "share-limit", "share-limit-g"
    configs = f"{EARLIEST};share.delivery.count.limit=3"
    produce(module_standalone, topic, 5)
    records = share_consume(module_standalone, topic, group, 5, configs=configs,
                            release="2", release_all="true", idle_ms=5_000, timeout_ms=60_000)
    deliveries = [r["delivery_count"] for r in records if r["offset"] == 2]
    assert deliveries == [1, 2, 3]
    assert sorted(r["offset"] for r in records if r["action"] == "accept") == [0, 1, 3, 4]


def test_dead_letter_topic_gets_what_reached_the_limit(module_standalone: Standalone) -> None:
    """share.dead.letter.topic: the record released at every delivery is delivered exactly
    share.delivery.count.limit times, then copied to the dead-letter topic, which a plain
    KafkaConsumer reads with headers naming its origin."""
    topic, group, dead = "share-dlq", "share-dlq-g", "share-dlq-dead"
    configs = f"{EARLIEST};share.delivery.count.limit=3;share.dead.letter.topic={dead}"
    produce(module_standalone, topic, 5)
    records = share_consume(module_standalone, topic, group, 5, configs=configs,
                            release="2", release_all="true", idle_ms=5_000, timeout_ms=60_000)
    assert [r["delivery_count"] for r in records if r["offset"] == 2] == [1, 2, 3]
    assert sorted(r["offset"] for r in records if r["action"] == "accept") == [0, 1, 3, 4]
    # the next fetch (any member's) copies offset 2 and archives it
    assert share_consume(module_standalone, topic, group, 1, configs="", idle_ms=3_000,
                         timeout_ms=8_000) == []
    run = run_java("KafkaConsume", bootstrap=module_standalone.bootstrap, topics=dead, count=1,
                   timeout_ms=30_000)
    [copy] = run.events("record")
    assert copy["value"] == "v2"
    headers = dict(copy["headers"])
    assert (headers["dlq.topic"], headers["dlq.offset"], headers["dlq.delivery.count"]) == (
        topic, "2", "4")
    listed = admin(module_standalone, "list_offsets", group)
    assert listed["offsets"] == [{"partition": f"{topic}-0", "start": 5}]


def test_read_committed_skips_aborted(module_standalone: Standalone) -> None:
    topic, group = "share-txn", "share-txn-g"
    run_java("KafkaTransactions", bootstrap=module_standalone.bootstrap, topic=topic,
             transactional_id="share-txn-1", committed=7, aborted=4)
    configs = f"{EARLIEST};share.isolation.level=read_committed"
    records = share_consume(module_standalone, topic, group, 7, configs=configs,
                            timeout_ms=20_000)
    assert sorted(r["value"] for r in records) == sorted(f"committed-{i}" for i in range(7))


def admin(server: Standalone, op: str, group: str, **named: Any) -> dict:
    run = run_java("KafkaShareAdmin", bootstrap=server.bootstrap, op=op, group=group, **named)
    [event] = run.records
    return event


@pytest.fixture
def short_session_standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A standalone whose share-group members are removed after 15 s of silence (heartbeats
    every second) instead of 45 s: test_admin_calls waits for a killed member to leave."""
    with running_standalone(tmp_path / "data", extra_args=[
            "--group-share-session-timeout-ms", "15000",
            "--group-share-heartbeat-interval-ms", "1000"]) as server:
        yield server


def call(java: JavaServer, op: str, group: str, **named: Any) -> dict:
    [event] = java.call(op=op, group=group, **named).records
    return event


def test_admin_calls(short_session_standalone: Standalone) -> None:
    server = short_session_standalone
    with JavaServer("KafkaShareAdmin", bootstrap=server.bootstrap) as java:  # one JVM, every call
        topic, group = "share-admin", "share-admin-g"
        produce(server, topic, 10)
        holder = start_share_consumer(server, topic, group, 4, hold="true",
                                      timeout_ms=120_000)
        assert holder.stdout is not None and '"ready"' in holder.stdout.readline()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and '"record"' not in holder.stdout.readline():
            pass
        described = call(java, "describe", group)
        assert described["state"] == "Stable" and len(described["members"]) == 1
        assert described["members"][0]["assignment"] == [f"{topic}-0"]
        refused = call(java, "alter_offsets", group, topic=topic, offset=0)
        assert refused["error"] == "GroupNotEmptyException", refused
        holder.kill()
        holder.communicate()
        listed = call(java, "list_offsets", group)
        assert listed["offsets"] == [{"partition": f"{topic}-0", "start": 0}]
        deadline = time.monotonic() + 60  # the killed member leaves after the session timeout
        while time.monotonic() < deadline:
            altered = call(java, "alter_offsets", group, topic=topic, offset=6)
            if altered.get("ok"):
                break
            time.sleep(2)
        assert altered == {"event": "alter_offsets", "ok": True}
        assert call(java, "list_offsets", group)["offsets"] == [
            {"partition": f"{topic}-0", "start": 6}]
        records = share_consume(server, topic, group, 4, configs="")
        assert sorted(r["offset"] for r in records) == [6, 7, 8, 9]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            deleted = call(java, "delete_offsets", group, topic=topic)
            if deleted.get("ok"):
                break
            time.sleep(2)
        assert deleted == {"event": "delete_offsets", "ok": True}
        assert call(java, "list_offsets", group)["offsets"] == []
        assert call(java, "delete", group) == {"event": "delete", "ok": True}
        gone = call(java, "describe", group)
        assert gone.get("error") == "GroupIdNotFoundException" or gone.get("state") == "Dead", gone
