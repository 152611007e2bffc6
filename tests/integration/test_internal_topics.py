"""RocketMQ's system topics in a fresh `ledgerwire standalone` (SCHEDULE_TOPIC_XXXX, the
transaction half topics, retry topics) are internal: Kafka Metadata marks them is_internal, so
Apache Kafka's Java AdminClient lists them only with listInternal, and `ledgerwire admin topics
list` shows them only with --include-internal.  Ordinary topics (and DLQ topics) stay visible.
"""

from __future__ import annotations

import pytest

from tests.support.java_clients import run_java
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SYSTEM = {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"}


def test_system_topics_are_internal(module_standalone: Standalone) -> None:
    server = module_standalone
    made = run_java("KafkaAdmin", bootstrap=server.bootstrap, op="create_topics",
                    topics="orders,.RETRY.billing,.DLQ.billing")
    assert len(made.events("created")) == 3
    every = set(run_java("KafkaAdmin", bootstrap=server.bootstrap, op="list_topics",
                         internal=True).one("topics")["names"])
    assert SYSTEM | {"orders", ".RETRY.billing", ".DLQ.billing"} <= every
    visible = set(run_java("KafkaAdmin", bootstrap=server.bootstrap, op="list_topics",
                           internal=False).one("topics")["names"])
    assert {"orders", ".DLQ.billing"} <= visible
    assert not visible & (SYSTEM | {".RETRY.billing"})
    described = run_java("KafkaAdmin", bootstrap=server.bootstrap, op="describe_topics",
                         topics="SCHEDULE_TOPIC_XXXX,orders")
    internal = {t["name"]: t["internal"] for t in described.events("topic")}
    assert internal == {"SCHEDULE_TOPIC_XXXX": True, "orders": False}

    listed = {t["topic"]: t["internal"] for t in server.admin("topics", "list")}
    assert "orders" in listed and not listed["orders"]
    assert not set(listed) & (SYSTEM | {".RETRY.billing"})
    everything = {t["topic"]: t["internal"] for t in
                  server.admin("topics", "list", "--include-internal")}
    assert all(everything[name] for name in SYSTEM | {".RETRY.billing"})
    assert everything[".DLQ.billing"] is False
