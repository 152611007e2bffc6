"""Disk monitor thresholds (with hysteresis) and crash-point counting."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ledger_backend.bookie.disk_monitor import DiskMonitor


def test_thresholds_and_hysteresis(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    used = {"value": 50}
    monitor = DiskMonitor(
        tmp_path,
        threshold=0.95,
        warn_threshold=0.90,
        usage_function=lambda _p: (used["value"], 100),
    )
    assert not monitor.check()
    used["value"] = 91
    with caplog.at_level(logging.WARNING):
        assert not monitor.check()
    assert "warn threshold" in caplog.text
    used["value"] = 95
    with caplog.at_level(logging.ERROR):
        assert monitor.check()
    assert "read-only" in caplog.text
    used["value"] = 92
    assert monitor.check()  # still above the warn level: stays read-only
    used["value"] = 89
    assert not monitor.check()


def test_failing_probe_keeps_state(tmp_path: Path) -> None:
    def broken(_path: Path) -> tuple[int, int]:
        raise OSError("statvfs failed")

    monitor = DiskMonitor(tmp_path, threshold=0.95, warn_threshold=0.9, usage_function=broken)
    assert not monitor.check()
    monitor.read_only = True
    assert monitor.check()


def test_real_filesystem_usage(tmp_path: Path) -> None:
    used, total = DiskMonitor(tmp_path, threshold=0.95, warn_threshold=0.9).usage()
    assert 0 < used <= total


@pytest.mark.slow
def test_crash_point_kills_on_the_nth_hit() -> None:
    code = (
        "from ledger_backend.bookie.crash_points import crash_point\n"
        "crash_point('other'); print('one', flush=True)\n"
        "crash_point('here'); print('two', flush=True)\n"
        "crash_point('here'); print('three', flush=True)\n"
    )
    env = dict(os.environ, LEDGERWIRE_CRASH_AT="here", LEDGERWIRE_CRASH_AFTER="2")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.split() == ["one", "two"]
