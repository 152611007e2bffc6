"""Fixtures shared by the whole suite, the order its files are handed to xdist workers, and the
slowest files of a run (to keep that order current)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standalone import Standalone, running_standalone

# The files that take longest in a full run, heaviest first: seconds each held its worker in
# session 8's clean CI run (3 workers, 17 min), or as measured since for files whose tests
# changed. scripts/run-tests hands files to the workers in collection order
# (--no-loadscope-reorder), and these go first, so no worker is left alone with a 2-minute file
# at the end while the others idle. Any other file keeps its place after them. Re-rank from the
# "slowest test files" table a full run prints.
SLOW_FILES_FIRST = (
    "tests/spark_bridge/test_spark_standalone_cluster.py",  # 157 (183-211 before)
    "tests/integration/test_consumer_groups_clients.py",  # 145
    "tests/rocketmq5/test_rocketmq5_clients.py",  # 128
    "tests/spark_bridge/test_spark_backfill.py",  # 111
    "tests/integration/test_group_restart.py",  # 100
    "tests/integration/test_share_groups_java.py",  # 94
    "tests/cluster/test_group_coordinator_move.py",  # 88
    "tests/integration/test_client_java.py",  # 88
    "tests/spark_bridge/test_spark_cli_errors.py",  # 83
    "tests/cluster/test_cluster_rocketmq5.py",  # 82 (the drain test no longer waits 30 s)
    "tests/cluster/test_share_groups_cluster.py",  # 82
    "tests/spark_bridge/test_spark_authorized_reads.py",  # 71
    "tests/cluster/test_failover.py",  # 69
    "tests/cluster/test_cluster_transactions.py",  # 62
    "tests/spark_bridge/test_spark_batch_reader.py",  # 60
    "tests/cluster/test_cluster_rocketmq.py",  # 57
    "tests/cluster/test_bookie_recovery.py",  # 54
    "tests/integration/test_transactions.py",  # 53
    "tests/cluster/test_cluster_walkthrough.py",  # 53
    "tests/integration/test_standalone_workers.py",  # 39
    "tests/integration/test_log_compaction_clients.py",  # 37
    "tests/replication/test_geo_follow.py",  # 36
    "tests/replication/test_geo_replication.py",  # 35 (128 at load ~12)
    "tests/cluster/test_cluster_operations.py",  # 35
    "tests/cluster/test_cluster_rocketmq_failover.py",  # 34 (110-270 at load 20-35)
    "tests/cluster/test_cluster_transactions_secured.py",  # 34
    "tests/cluster/test_sticky_ownership.py",  # 33
    "tests/cluster/test_chaos_short.py",  # 32
    "tests/offload/test_offload_clients.py",  # 30 (185 at load ~30: three standalones)
    "tests/integration/test_worker_count_change.py",  # 30 (three starts, 1 and 2 workers)
    "tests/integration/test_worker_count_change_rocketmq.py",  # 37
    "tests/spark_bridge/test_spark_transactions.py",  # 26-45
    "tests/replication/test_geo_clusters.py",  # ~30 (70-100 on a loaded machine)
    "tests/integration/test_standalone_workers_rocketmq.py",  # 34 (62-115 at load 20+)
    "tests/integration/test_standalone_workers_secured.py",  # 32-40
    "tests/offload/test_offload_rocketmq.py",  # < 30 (60-140 at load 30-45)
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Known-slow files first (in SLOW_FILES_FIRST's order); the rest keep collection order."""
    rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


# Seconds per test file (setup + call + teardown of its tests): with --dist loadfile, how long
# the file holds its worker. A run of many files prints its slowest ones at the end.
_FILE_SECONDS: Counter[str] = Counter()
_SLOWEST_FILES_SHOWN = 30
_FILES_FOR_SUMMARY = 20  # a targeted run of a few files prints nothing


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _FILE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if len(_FILE_SECONDS) < _FILES_FOR_SUMMARY:
        return
    terminalreporter.write_sep("=", f"slowest {_SLOWEST_FILES_SHOWN} test files (seconds "
                                    "of setup, call and teardown; SLOW_FILES_FIRST lists those "
                                    "over ~35 s)")  # fmt: skip
    for path, seconds in _FILE_SECONDS.most_common(_SLOWEST_FILES_SHOWN):
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A running `ledgerwire standalone` subprocess with its own data dir and ports."""
    with running_standalone(tmp_path / "data") as server:
        yield server


@pytest.fixture(scope="module")
def module_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One `ledgerwire standalone` shared by the tests of a module (they use distinct topics)."""
    with running_standalone(tmp_path_factory.mktemp("standalone") / "data") as server:
        yield server
