"""`ledgerwire replay` as a user runs it (a subprocess of the real CLI): clear, fast errors.

An unknown topic and unreachable metadata end in one line within 5 s, before any JVM starts; a
Spark master that is not there in one line within 15 s; a job that fails inside Spark names its
cause in one line and the log file holding Spark's stack; no Java stack or Spark WARN chatter
ever reaches stderr; a successful replay prints the Spark UI address.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spark_bridge_support import ProducedTopic, produce_history, start_standalone
from support.standalone import Standalone, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout_s: float = 300, cwd: Path | None = None
            ) -> tuple[int, str, str, float]:  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gateway.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s,
                          cwd=cwd)  # fmt: skip
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def startup_s() -> float:
    """How long this machine takes to start the CLI's Python and import what a replay
    imports before its first check (a loaded CI machine: seconds); the time bounds below
    are the CLI's own waiting on top of twice that (the load moves between the two runs: at
    load 15 a 5 s bound failed by 1.7 s), still far below a connect timeout's 30 s and more."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import gateway.cli.main, spark_bridge.planner, "
                    "spark_bridge.ledger_access, kazoo.client"], env=env, check=True)
    return time.monotonic() - started


def assert_no_java(stderr: str) -> None:
    for marker in ("\tat ", "Traceback", "Py4J", "WARN ", "ERROR ", "java."):
        assert marker not in stderr, stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone,
                                                                       ProducedTopic]]:
    running = start_standalone(tmp_path_factory.mktemp("cli"), max_entries_per_ledger=40)
    try:
        yield running, produce_history(running, "cli", 600, partitions=2)
    finally:
        running.stop()


def test_unknown_topic_is_one_line_within_5s(broker: tuple[Standalone, ProducedTopic],
                                             tmp_path: Path) -> None:  # fmt: skip
    standalone, _ = broker
    baseline = startup_s()
    code, out, err, seconds = run_cli("replay", "--topic", "nope", "--to", str(tmp_path / "o"),
                                      "--metadata", str(standalone.data_dir))  # fmt: skip
    assert code == 2
    assert err.strip().splitlines() == [
        "ledgerwire replay: option 'subscribe': unknown topic 'nope'"]
    assert seconds < 5.0 + 2 * baseline, (seconds, baseline)
    assert not (tmp_path / "o").exists()


def test_unreachable_metadata_is_one_line_within_5s(tmp_path: Path) -> None:
    url = f"zk://127.0.0.1:{free_port()}/ledgerwire"
    baseline = startup_s()
    code, _out, err, seconds = run_cli("replay", "--topic", "t", "--to", str(tmp_path / "o"),
                                       "--metadata", url)  # fmt: skip
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ledgerwire replay: cannot reach ledgerwire metadata at {url}")
    assert seconds < 5.0 + 2 * baseline, (seconds, baseline)
    assert_no_java(err)


def test_missing_metadata_directory_is_one_line(tmp_path: Path) -> None:
    code, _out, err, _s = run_cli("replay", "--topic", "t", "--to", str(tmp_path / "o"),
                                  "--metadata", str(tmp_path / "nothing"))  # fmt: skip
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "option 'ledgerwire.metadata'" in err


def test_unreadable_bookie_secret_is_one_line(broker: tuple[Standalone, ProducedTopic],
                                              tmp_path: Path) -> None:  # fmt: skip
    standalone, _ = broker
    code, _out, err, _s = run_cli("replay", "--topic", "cli", "--to", str(tmp_path / "o"),
                                  "--metadata", str(standalone.data_dir),
                                  "--bookie-secret-file", str(tmp_path / "absent"))  # fmt: skip
    assert code == 2
    assert err.strip().splitlines() == [
        f"ledgerwire replay: option 'ledgerwire.bookieSecretFile'="
        f"{str(tmp_path / 'absent')!r}: cannot read that file"]


def test_unreachable_master_is_one_line_within_15s(broker: tuple[Standalone, ProducedTopic],
                                                   tmp_path: Path) -> None:  # fmt: skip
    standalone, _ = broker
    baseline = startup_s()
    master = f"spark://127.0.0.1:{free_port()}"
    code, _out, err, seconds = run_cli("replay", "--topic", "cli", "--to", str(tmp_path / "o"),
                                       "--metadata", str(standalone.data_dir),
                                       "--master", master)  # fmt: skip
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ledgerwire replay: cannot reach the Spark master at {master}")
    assert seconds < 15.0 + 2 * baseline, (seconds, baseline)


def test_replay_then_a_failing_job(broker: tuple[Standalone, ProducedTopic],
                                   tmp_path: Path) -> None:  # fmt: skip
    """A real run: stdout has the summary, stderr only ledgerwire's lines (with the UI address);
    a second run into the same target fails inside Spark: one line naming the log file, which
    holds the stack."""
    standalone, produced = broker
    target = tmp_path / "out"
    log = tmp_path / "spark.log"
    code, out, err, _s = run_cli("replay", "--topic", "cli", "--to", str(target), "--metadata",
                                 str(standalone.data_dir), "--master", "local[1]",
                                 "--log-file", str(log), "--progress-interval", "0.2")  # fmt: skip
    assert code == 0, err
    assert "replay: 600 rows" in out
    assert_no_java(err)
    assert "Spark UI http://" in err, err
    progress = [line for line in err.splitlines() if "/600 records" in line]
    assert progress, err  # not a terminal: plain lines, with the planned total
    assert "records/s" in progress[-1] and "ETA" in progress[-1]
    assert pq.read_table(target).num_rows == len(produced.rows)

    code, out, err, _s = run_cli("replay", "--topic", "cli", "--to", str(target), "--metadata",
                                 str(standalone.data_dir), "--master", "local[1]",
                                 "--log-file", str(log), "--no-ui")  # fmt: skip
    assert code == 1
    lines = err.strip().splitlines()
    assert "already exists" in lines[-1], err
    assert lines[-1].endswith(f"(details: {log})")
    assert_no_java(err)
    assert "Traceback" in log.read_text()


def test_backfill_unreachable_metadata_and_brokers_are_one_line(
        broker: tuple[Standalone, ProducedTopic], tmp_path: Path) -> None:  # fmt: skip
    standalone, _ = broker
    source = tmp_path / "in.json"
    source.write_text('{"value": "a"}\n')
    baseline = startup_s()
    url = f"zk://127.0.0.1:{free_port()}/ledgerwire"
    code, _out, err, seconds = run_cli("backfill", "--from", str(source), "--topic", "cli",
                                       "--metadata", url)  # fmt: skip
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot reach ledgerwire metadata at {url}" in err
    assert seconds < 5.0 + 2 * baseline, (seconds, baseline)
    bootstrap = f"127.0.0.1:{free_port()}"
    code, _out, err, seconds = run_cli("backfill", "--from", str(source), "--topic", "cli",
                                       "--metadata", str(standalone.data_dir),
                                       "--bootstrap-servers", bootstrap)  # fmt: skip
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot reach the brokers at {bootstrap}" in err
    assert seconds < 10.0 + 2 * baseline, (seconds, baseline)
