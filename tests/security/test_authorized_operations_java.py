"""Authorized operations computed from the ACLs (KIP-430), as Apache Kafka's Java AdminClient
4.3 asks for them: describeTopics and describeCluster with includeAuthorizedOperations, on a
secured `ledgerwire standalone` where alice holds a few grants and the admin is a super user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.java_clients import JavaRun, run_java
from tests.support.secured_standalone import PASSWORDS, secured_standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC_OPERATIONS = ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE",
                    "DESCRIBE_CONFIGS", "READ", "WRITE"]



def java_admin(bootstrap: str, user: str, op: str, **named: Any) -> JavaRun:
    """One Java Admin call (its own JVM) logged in as `user` with SASL/PLAIN."""
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{user}" password="{PASSWORDS[user]}";')
    return run_java("KafkaAdmin", bootstrap=bootstrap, op=op, kafka={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas}, **named)

def test_authorized_operations_follow_the_acls(tmp_path: Path) -> None:
    server = secured_standalone(tmp_path / "ops")
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap,
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": PASSWORDS["admin"]})
        for future in admin.create_topics([NewTopic("ops-a", 1), NewTopic("ops-b", 1)]).values():
            future.result(30)
        grants = [
            (ResourceType.TOPIC, "ops-a", AclOperation.READ),
            (ResourceType.TOPIC, "ops-a", AclOperation.WRITE),
            (ResourceType.TOPIC, "ops-b", AclOperation.DESCRIBE_CONFIGS),
            (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
            (ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
        ]
        for future in admin.create_acls([
                AclBinding(rt, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for rt, name, op in grants]).values():
            future.result(30)

        topics = java_admin(server.bootstrap, "alice", "describe_topics", topics="ops-a,ops-b",
                            authorized_operations=True)
        ops = {t["name"]: t["authorized_operations"] for t in topics.events("topic")}
        # READ and WRITE imply DESCRIBE; DESCRIBE_CONFIGS alone does not
        assert ops["ops-a"] == ["DESCRIBE", "READ", "WRITE"]
        assert "ops-b" not in ops  # no DESCRIBE on ops-b: the topic is not shown
        cluster = java_admin(server.bootstrap, "alice", "describe_cluster",
                             authorized_operations=True).one("cluster")
        assert cluster["authorized_operations"] == ["DESCRIBE", "IDEMPOTENT_WRITE"]

        everything = java_admin(server.bootstrap, "admin", "describe_topics", topics="ops-b",
                                authorized_operations=True)
        assert everything.one("topic")["authorized_operations"] == TOPIC_OPERATIONS
        plain = java_admin(server.bootstrap, "alice", "describe_topics", topics="ops-a")
        assert plain.one("topic")["authorized_operations"] is None  # not asked: omitted
    finally:
        server.stop()
