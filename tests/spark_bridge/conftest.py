"""Fixtures for the Spark bridge tests: one local Spark session, real standalone brokers.

The SparkSession is session-scoped (a JVM start costs seconds on two cores). Topic data comes
from a real `ledgerwire standalone` subprocess, produced with confluent-kafka.  Every test's
temp directory (the CLIs' default run log, the shipped code's zip) is inside its tmp_path, and
the loggers a CLI run redirects to its log are put back after the test.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from support.standalone import Standalone

from spark_bridge.spark_session import _QUIET_LOGGERS as RUN_LOGGERS

HERE = Path(__file__).parent
# A Spark job on a loaded 2-core CI machine can outlast the suite's 300 s; worse, pytest-timeout
# interrupting a py4j call leaves the worker's shared session's connection out of step, and
# every later Spark test on that worker fails with it (one timeout cost 18 tests in a CI run).
SPARK_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.fixture(autouse=True)
def cli_runs_leave_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                  ) -> Iterator[None]:  # fmt: skip
    """`ledgerwire replay` / `backfill` write a run log (and ship a zip of the bridge's code)
    into the temp directory by default: here the test's own, in this process and in the CLI
    subprocesses it starts, not /tmp, which kept a file per run.  A CLI run in this process
    sends its loggers to its log file only (propagate off): put them back, or every later test
    on this pytest worker would see none of their records (caplog checks that could not fail)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    saved = [(list(lg.handlers), lg.propagate, lg.level) for lg in loggers]
    yield
    for lg, (handlers, propagate, level) in zip(loggers, saved, strict=True):
        for handler in [h for h in lg.handlers if h not in handlers]:
            lg.removeHandler(handler)
            handler.close()
        lg.propagate = propagate
        lg.setLevel(level)


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
