"""The in-process operations stack's shape and a record-batch maker (shared by the tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.admin.api import AdminContext
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.retention_policies import RetentionPolicies
from gateway.topics.topic_service import TopicService
from protocols.kafka import record_batch as rb
from protocols.kafka.group_coordinator import GroupCoordinator


def batch(n: int = 2, *, ts: int = 1_000, size: int = 10) -> bytes:
    return rb.build_batch([(None, b"%d" % i + b"x" * size) for i in range(n)], timestamp_ms=ts)


@dataclass
class OpsStack:
    store: Any
    topics: TopicService
    namespaces: NamespaceRegistry
    coordinator: GroupCoordinator
    retention: RetentionPolicies
    admin: AdminContext
    clock_ms: list[int]
