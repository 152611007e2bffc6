"""Fixtures for the transaction tests: the partition-log fixtures (memory store, MemoryBookKeeper,
topic services) and the in-process Kafka stack with its transaction coordinator."""

from __future__ import annotations

from tests.kafka_server.conftest import stack  # noqa: F401 - a fixture
from tests.partition_log.conftest import bookkeeper, make_broker, store  # noqa: F401 - fixtures
