"""AdminClient calls of Apache Kafka's Java client 4.3 that `kafka-transactions.sh`,
`kafka-leader-election.sh` and `kafka-topics.sh --topic-id` make, against `ledgerwire
standalone`: ListTransactions with its state, producer-id and duration filters,
DescribeTransactions, ElectLeaders, and Metadata topics looked up by id.
"""

from __future__ import annotations

import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.java_clients import JavaRun, JavaServer, run_java, start_java
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def java(module_standalone: Standalone) -> Iterator[JavaServer]:
    """One Java Admin (one JVM) serving every admin call of the module."""
    with JavaServer("KafkaAdmin", bootstrap=module_standalone.bootstrap) as server:
        yield server


def admin(java: JavaServer, op: str, **named: Any) -> JavaRun:
    return java.call(op=op, **named)


def listed(java: JavaServer, **filters: object) -> dict[str, dict]:
    run = admin(java, "list_transactions", **filters)
    return {t["transactional_id"]: t for t in run.one("transactions")["listings"]}


def test_list_and_describe_transactions(module_standalone: Standalone, java: JavaServer) -> None:
    server = module_standalone
    topic = "java-txn-admin"
    admin(java, "create_topics", topics=topic, partitions=2)
    done = run_java("KafkaTransactions", bootstrap=server.bootstrap, topic=topic,
                    transactional_id="txn-done", committed=3, aborted=0)
    assert done.one("done")
    # a transaction left open for a while, in the background
    holder = start_java("KafkaTransactions", bootstrap=server.bootstrap, topic=topic,
                        transactional_id="txn-open", committed=0, aborted=0, open=4,
                        hold_ms=300_000)  # terminated below
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if listed(java, states="Ongoing"):
                break
            time.sleep(0.5)
        everything = listed(java)
        assert everything["txn-done"]["state"] == "CompleteCommit"
        assert everything["txn-open"]["state"] == "Ongoing"
        assert set(listed(java, states="Ongoing")) == {"txn-open"}
        assert set(listed(java, states="CompleteCommit,CompleteAbort")) == {"txn-done"}
        open_pid = everything["txn-open"]["producer_id"]
        assert set(listed(java, producer_ids=open_pid)) == {"txn-open"}
        assert listed(java, producer_ids=open_pid + 1000) == {}
        time.sleep(1.5)
        assert "txn-open" in listed(java, states="Ongoing", duration_ms=1000)
        assert listed(java, states="Ongoing", duration_ms=3_600_000) == {}

        described = admin(java, "describe_transactions", ids="txn-open,txn-done,txn-none")
        by_id = {e["transactional_id"]: e for e in described.events("transaction")}
        assert by_id["txn-open"]["state"] == "Ongoing"
        assert by_id["txn-open"]["producer_id"] == open_pid
        assert by_id["txn-open"]["partitions"]
        assert all(p.startswith(f"{topic}:") for p in by_id["txn-open"]["partitions"])
        assert by_id["txn-open"]["timeout_ms"] == 60_000
        assert by_id["txn-open"]["start_ms"] <= time.time() * 1000
        assert by_id["txn-done"]["state"] == "CompleteCommit"
        assert described.one("error") == {
            "event": "error", "error": "TransactionalIdNotFoundException",
            "message": described.one("error")["message"], "transactional_id": "txn-none"}
    finally:
        holder.terminate()
        holder.communicate(timeout=30)


def test_elect_leaders_single_owner(java: JavaServer) -> None:
    admin(java, "create_topics", topics="java-elect", partitions=2)
    for election in ("PREFERRED", "UNCLEAN"):
        run = admin(java, "elect_leaders", type=election,
                    partitions="java-elect:0,java-elect:1,java-elect:7,no-such-topic:0")
        results = {(e["topic"], e["partition"]): e["error"] for e in run.events("election")}
        assert results == {
            ("java-elect", 0): "ElectionNotNeededException",
            ("java-elect", 1): "ElectionNotNeededException",
            ("java-elect", 7): "UnknownTopicOrPartitionException",
            ("no-such-topic", 0): "UnknownTopicOrPartitionException",
        }
    everything = admin(java, "elect_leaders", type="PREFERRED")
    assert everything.one("elected")["count"] == 0  # nothing needed an election


def test_describe_topics_by_id(java: JavaServer) -> None:
    admin(java, "create_topics", topics="java-by-id-a,java-by-id-b", partitions=3)
    by_name = admin(java, "describe_topics", topics="java-by-id-a,java-by-id-b")
    ids = {t["name"]: t["id"] for t in by_name.events("topic")}
    unknown_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")  # Java's Uuid text
    by_id = admin(java, "describe_topics", ids=f"{ids['java-by-id-a']},{ids['java-by-id-b']},"
                                                 f"{unknown_id}")
    found = {t["id"]: t for t in by_id.events("topic")}
    assert found[ids["java-by-id-a"]]["name"] == "java-by-id-a"
    assert len(found[ids["java-by-id-b"]]["partitions"]) == 3
    assert by_id.one("error")["error"] == "UnknownTopicIdException"
    assert by_id.one("error")["id"] == unknown_id



def test_describe_log_dirs_real_sizes(module_standalone: Standalone, java: JavaServer) -> None:
    server = module_standalone
    admin(java, "create_topics", topics="java-logdirs", partitions=2)
    run_java("KafkaProduce", bootstrap=server.bootstrap, topic="java-logdirs", partition=0,
             count=300, value_prefix="x" * 200)
    first = admin(java, "describe_log_dirs", brokers=0).one("log_dir")
    assert first["path"] == str(server.data_dir.resolve())
    assert first["error"] is None
    assert first["total_bytes"] > 0 and 0 <= first["usable_bytes"] <= first["total_bytes"]
    sizes = {(r["topic"], r["partition"]): r["size"] for r in first["replicas"]}
    assert sizes[("java-logdirs", 1)] == 0
    assert sizes[("java-logdirs", 0)] > 300 * 200  # the values alone, compressed or not
    run_java("KafkaProduce", bootstrap=server.bootstrap, topic="java-logdirs", partition=1,
             count=10)
    again = admin(java, "describe_log_dirs", brokers=0).one("log_dir")
    later = {(r["topic"], r["partition"]): r["size"] for r in again["replicas"]}
    assert later[("java-logdirs", 0)] == sizes[("java-logdirs", 0)]
    assert later[("java-logdirs", 1)] > 0
    assert all(r["offset_lag"] == 0 and not r["future"] for r in again["replicas"])
