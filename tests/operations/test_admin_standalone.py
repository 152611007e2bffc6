"""The admin CLI and HTTP API against a real `ledgerwire standalone` (two bookies).

Every operation round-trips through `ledgerwire admin ... --json` (a subprocess, as an operator
runs it) and the HTTP endpoints; traffic comes from confluent-kafka, and /metrics is parsed with
prometheus_client's parser.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standalone import REPO, Standalone

pytestmark = [pytest.mark.integration]


class AdminStandalone(Standalone):
    def __init__(self, data_dir: Path, bookies: int = 2) -> None:
        # small entry logs and journal files, so that GC can free whole files in a test
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        config = data_dir.parent / "ops.toml"
        config.write_text("[storage]\nentry_log_max_mb = 1\njournal_max_file_mb = 1\n")
        # the base class gives every standalone its own admin port (self.admin_port)
        super().__init__(data_dir, bookies=bookies, extra_args=["--config", str(config)])

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        super().start(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # the admin port opens right after the Kafka one
            try:
                self.http("GET", "/health")
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"admin API did not open:\n{self.log()}")

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.admin_url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, payload, ctype = response.status, response.read(), \
                    response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            status, payload, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
        return status, json.loads(payload) if "json" in ctype else payload.decode()

    def cli(self, *args: str, json_output: bool = True) -> Any:
        argv = [sys.executable, "-m", "gateway", "admin", *args, "--admin-url", self.admin_url]
        if json_output:
            argv.append("--json")
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"admin {args} failed ({done.returncode}): {done.stderr}")
        return json.loads(done.stdout) if json_output else done.stdout

    def cli_fails(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gateway", "admin", *args, "--admin-url",
                               self.admin_url], cwd=REPO, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode != 0, done.stdout
        return done.stderr

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, text = self.http("GET", "/metrics")
        assert status == 200
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminStandalone]:
    s = AdminStandalone(tmp_path_factory.mktemp("ops") / "data")
    s.start()
    try:
        yield s
    finally:
        if s.proc is not None and s.proc.poll() is None:
            s.stop()


def produce(server: Standalone, topic: str, count: int, size: int = 100,
            one_per_batch: bool = False) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(count):
        p.produce(topic, key=b"k%d" % i, value=b"v" * size)
        p.poll(0)
        if one_per_batch:
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def consume_and_commit(server: Standalone, topic: str, group: str, count: int) -> None:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
                if got == count:
                    c.commit(message=msg, asynchronous=False)
        assert got == count
    finally:
        c.close()


def test_health_ready_and_unknown_paths(server: AdminStandalone) -> None:
    assert server.http("GET", "/health") == (200, {"status": "ok"})
    assert server.http("GET", "/ready") == (200, {"ready": True})
    assert server.http("GET", "/admin/v1/nothing")[0] == 404
    assert server.http("PUT", "/admin/v1/topics/x", "not an object")[0] == 400


def test_tenants_namespaces_policies_topics_round_trip(server: AdminStandalone) -> None:
    assert server.cli("tenants", "create", "acme") == {"tenant": "acme"}
    assert "acme" in server.cli("tenants", "list")
    assert "already exists" in server.cli_fails("tenants", "create", "acme")
    server.cli("namespaces", "create", "acme/sales", "--policy", "max_topics=3")
    assert server.cli("namespaces", "list", "--tenant", "acme") == ["acme/sales"]
    assert server.cli("policies", "get", "acme/sales") == {"max_topics": 3}
    assert server.cli("policies", "set", "acme/sales", "message_ttl_seconds=600",
                      "auto_create_topics=false") == {
        "max_topics": 3, "message_ttl_seconds": 600, "auto_create_topics": False}
    assert "write_quorum" in server.cli_fails("policies", "set", "acme/sales",
                                              "ensemble_size=1", "write_quorum=2")
    created = server.cli("topics", "create", "acme.sales.orders", "--partitions", "2",
                         "--config", "retention.ms=3600000")
    assert created == {"topic": "acme.sales.orders", "partitions": 2,
                       "namespace": "acme/sales"}
    server.cli("topics", "create", "plain-orders", "--namespace", "acme/sales")
    listed = server.cli("topics", "list", "--namespace", "acme/sales")
    assert [t["topic"] for t in listed] == ["acme.sales.orders", "plain-orders"]
    described = server.cli("topics", "describe", "plain-orders")
    assert described["partitions"][0]["managed_ledger"] == "acme/sales/plain-orders-0"
    assert described["partitions"][0]["owner"] == 0
    table = server.cli("topics", "describe", "acme.sales.orders", json_output=False)
    assert "PARTITION" in table and "acme/sales" in table
    assert server.cli("namespaces", "describe", "acme/sales")["topics"] == [
        "acme.sales.orders", "plain-orders"]
    assert "still has topics" in server.cli_fails("namespaces", "delete", "acme/sales")
    server.cli("topics", "delete", "acme.sales.orders")
    server.cli("topics", "delete", "plain-orders")
    assert "does not exist" in server.cli_fails("topics", "describe", "plain-orders")
    server.cli("namespaces", "delete", "acme/sales")
    server.cli("tenants", "delete", "acme")
    assert "acme" not in server.cli("tenants", "list")


def test_brokers_and_bookies_list(server: AdminStandalone) -> None:
    brokers = server.cli("brokers", "list")
    assert brokers[0]["broker_id"] == 0 and brokers[0]["kafka"] == server.bootstrap
    bookies = server.cli("bookies", "list")
    assert [b["bookie"] for b in bookies] == ["standalone-bookie-0", "standalone-bookie-1"]
    assert all(b["state"] == "read-write" and b["disk_total_bytes"] > 0 for b in bookies)
    assert "standalone-bookie-1" in server.cli("bookies", "list", json_output=False)


def test_namespace_quorum_policy_gives_ledgers_that_ensemble(server: AdminStandalone) -> None:
    server.cli("tenants", "create", "repl")
    server.cli("namespaces", "create", "repl/two", "--policy", "ensemble_size=2",
               "--policy", "write_quorum=2", "--policy", "ack_quorum=2")
    server.cli("topics", "create", "repl.two.t", "--partitions", "1")
    produce(server, "repl.two.t", 10)
    ledgers = server.cli("topics", "describe", "repl.two.t")["partitions"][0]["ledgers"]
    assert ledgers and all(
        (x["ensemble_size"], x["write_quorum"], x["ack_quorum"]) == (2, 2, 2) and
        len(set(x["ensemble"])) == 2 for x in ledgers)
    server.cli("topics", "create", "default-quorum", "--partitions", "1")
    default = server.cli("topics", "describe", "default-quorum")["partitions"][0]["ledgers"]
    assert default[0]["ensemble_size"] == 1


def test_auto_create_off_refuses_unknown_topics(server: AdminStandalone) -> None:
    server.cli("tenants", "create", "strict")
    server.cli("namespaces", "create", "strict/ns", "--policy", "auto_create_topics=false")
    p = Producer({"bootstrap.servers": server.bootstrap})
    refused = p.list_topics(topic="strict.ns.unknown", timeout=10).topics["strict.ns.unknown"]
    assert refused.error is not None
    assert refused.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    allowed = p.list_topics(topic="auto-made", timeout=10).topics["auto-made"]
    assert allowed.error is None
    assert "auto-made" in [t["topic"] for t in server.cli("topics", "list")]


def test_metrics_move_with_traffic_and_group_lag(server: AdminStandalone) -> None:
    topic, group = "metered", "metered-group"
    server.cli("topics", "create", topic, "--partitions", "1")
    before = server.metrics()
    produce(server, topic, 40)
    consume_and_commit(server, topic, group, 25)
    after = server.metrics()
    key = (("topic", topic),)
    assert after[("ledgerwire_topic_produce_messages_total", key)] - \
        before.get(("ledgerwire_topic_produce_messages_total", key), 0) == 40
    assert after[("ledgerwire_topic_produce_bytes_total", key)] > 40 * 100
    assert after[("ledgerwire_topic_fetch_messages_total", key)] >= 25
    assert after[("ledgerwire_request_latency_seconds_count", (("api", "Produce"),))] > \
        before.get(("ledgerwire_request_latency_seconds_count", (("api", "Produce"),)), 0)
    assert after[("ledgerwire_partition_log_end_offset",
                  (("partition", "0"), ("topic", topic)))] == 40
    assert after[("ledgerwire_consumer_group_lag",
                  (("group", group), ("partition", "0"), ("topic", topic)))] == 15
    assert after[("ledgerwire_journal_fsync_seconds_count",
                  (("bookie", "standalone-bookie-0"),))] > 0
    assert after[("ledgerwire_ledgers", ())] >= 1
    assert ("ledgerwire_under_replicated_ledgers", ()) in after
    assert ("ledgerwire_cache_hit_ratio", (("cache", "bookie_read"),)) in after
    assert ("ledgerwire_bookie_disk_used_bytes", (("bookie", "standalone-bookie-1"),)) in after

    described = server.cli("groups", "describe", group)
    (row,) = described["partitions"]
    assert row["lag"] == row["log_end_offset"] - row["committed_offset"] == 40 - 25
    assert group in [g["group"] for g in server.cli("groups", "list")]
    assert "LAG" in server.cli("groups", "describe", group, json_output=False)

    reset = server.cli("groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert reset["offsets"] == {"0": 0}
    assert server.cli("groups", "describe", group)["partitions"][0]["lag"] == 40
    server.cli("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "7")
    assert server.cli("groups", "describe", group)["partitions"][0]["committed_offset"] == 7
    server.cli("groups", "reset-offsets", group, "--topic", topic, "--to-latest")
    assert server.cli("groups", "describe", group)["total_lag"] == 0
    future = int(time.time() * 1000) + 3_600_000
    stamped = server.cli("groups", "reset-offsets", group, "--topic", topic,
                         "--to-timestamp", str(future))
    assert stamped["offsets"] == {"0": 40}
    past = server.cli("groups", "reset-offsets", group, "--topic", topic, "--to-timestamp", "0")
    assert past["offsets"] == {"0": 0}
    assert "does not exist" in server.cli_fails("groups", "describe", "no-such-group")


def test_consumed_ledgers_are_deleted_and_bookies_reclaim_space(
        server: AdminStandalone) -> None:
    server.cli("tenants", "create", "pulsar")
    server.cli("namespaces", "create", "pulsar/noretention",
               "--policy", "retention_time_minutes=0")
    topic = "pulsar.noretention.events"
    server.cli("topics", "create", topic, "--config", "segment.bytes=200000")
    produce(server, topic, 60, size=50_000, one_per_batch=True)  # 3 MB in ~200 KB ledgers
    ledgers = server.cli("topics", "describe", topic)["partitions"][0]["ledgers"]
    assert len(ledgers) > 5
    server.http("POST", "/admin/v1/bookies/gc", {})
    data_before = sum(b["data_bytes"] for b in server.cli("bookies", "list"))
    consume_and_commit(server, topic, "reader", 60)
    status, done = server.http("POST", "/admin/v1/retention/run", {})
    assert status == 200 and done["ledgers_deleted"][f"{topic}-0"] >= len(ledgers) - 2
    part = server.cli("topics", "describe", topic)["partitions"][0]
    assert len(part["ledgers"]) <= 2 and part["log_start_offset"] >= 50
    server.cli("bookies", "gc")
    data_after = sum(b["data_bytes"] for b in server.cli("bookies", "list"))
    assert data_after < data_before - 1_000_000, (data_before, data_after)


def test_a_busy_admin_port_does_not_stop_the_broker(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        s = Standalone(tmp_path / "data", extra_args=["--admin-listener", f"127.0.0.1:{port}"])
        s.start()
        try:
            produce(s, "still-works", 3)
            deadline = time.monotonic() + 10
            while "admin HTTP API not started" not in s.log() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "admin HTTP API not started" in s.log()
        finally:
            assert s.stop() == 0
