"""Fixtures shared by the whole suite, the order its files are handed to xdist workers, and the
slowest files of a run (to keep that order current)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standalone import Standalone, running_standalone

# The files that take longest in a full run (seconds of their slowest tests in a CI run on
# 2 workers, heaviest first). scripts/run-tests hands files to the workers in collection order
# (--no-loadscope-reorder), and these go first, so no worker is left alone with a 2-minute file
# at the end while the other idles. Any other file keeps its place after them.
SLOW_FILES_FIRST = (
    "tests/spark_bridge/test_spark_standalone_cluster.py",  # 323
    "tests/spark_bridge/test_spark_cli_errors.py",  # 159
    "tests/integration/test_group_restart.py",  # 133
    "tests/spark_bridge/test_spark_backfill.py",  # 133
    "tests/spark_bridge/test_spark_authorized_reads.py",  # ~120 at load ~25 (SASL standalone)
    "tests/replication/test_geo_clusters.py",  # 70-100 (two clusters, loaded machine)
    "tests/integration/test_share_groups_java.py",  # 106
    "tests/cluster/test_cluster_rocketmq5.py",  # ~100 (new; 120-134 s at load ~20)
    "tests/cluster/test_cluster_rocketmq_failover.py",  # 79 at load ~16, 110-270 at load 20-35
    "tests/cluster/test_group_coordinator_move.py",  # 125 before a shared cluster
    "tests/rocketmq5/test_rocketmq5_clients.py",  # 87
    "tests/cluster/test_share_groups_cluster.py",  # 87
    "tests/cluster/test_chaos_short.py",  # 74
    "tests/cluster/test_bookie_recovery.py",  # 69
    "tests/integration/test_standalone_workers_rocketmq.py",  # 62 at load 20, 115 at load 20+
    "tests/cluster/test_readme_walkthrough.py",  # 142 in CI, 68 at load ~15 now
    "tests/cluster/test_cluster_transactions.py",  # 52
    "tests/offload/test_offload_clients.py",  # 185 at load ~30 (three standalones)
    "tests/offload/test_offload_rocketmq.py",  # 60-140 at load 30-45 (two restarts, C++ client)
    "tests/replication/test_geo_replication.py",  # 50
    "tests/spark_bridge/test_spark_batch_reader.py",  # 50
    "tests/cluster/test_failover.py",  # 48
    "tests/spark_bridge/test_spark_transactions.py",  # 46
    "tests/cluster/test_bookie_faults.py",  # 45
    "tests/security/test_scram_admin_java.py",  # 42
    "tests/cluster/test_cluster_rocketmq.py",  # 40
    "tests/cluster/test_load_transfer.py",  # 37
    "tests/cluster/test_sticky_ownership.py",  # 37
    "tests/integration/test_consumer_groups_clients.py",  # 36
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
