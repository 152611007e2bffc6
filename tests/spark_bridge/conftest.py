"""Fixtures for the Spark bridge tests: one local Spark session, real standalone brokers.

The SparkSession is session-scoped (a JVM start costs seconds on two cores). Topic data comes
from a real `ledgerwire standalone` subprocess, produced with confluent-kafka.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from support.standalone import Standalone


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
