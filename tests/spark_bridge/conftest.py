"""Fixtures for the Spark bridge tests: one local Spark session, real standalone brokers.

The SparkSession is session-scoped (a JVM start costs seconds on two cores). Topic data comes
from a real `ledgerwire standalone` subprocess, produced with confluent-kafka.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from support.standalone import Standalone

HERE = Path(__file__).parent
# A Spark job on a loaded 2-core CI machine can outlast the suite's 300 s; worse, pytest-timeout
# interrupting a py4j call leaves the worker's shared session's connection out of step, and
# every later Spark test on that worker fails with it (one timeout cost 18 tests in a CI run).
SPARK_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_bridge

    session = (SparkSession.builder.master("local[2]").appName("ledgerwire-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .getOrCreate())  # fmt: skip
    session.sparkContext.setLogLevel("ERROR")
    spark_bridge.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def history_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = start_standalone(tmp_path_factory.mktemp("history"), max_entries_per_ledger=60)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def history(history_broker: Standalone) -> ProducedTopic:
    """50,000 messages in 'history' (2 partitions, keys, headers, every codec, rollovers)."""
    return produce_history(history_broker, "history", 50_000)


@pytest.fixture
def metadata_dir(history_broker: Standalone) -> str:
    return str(history_broker.data_dir)
