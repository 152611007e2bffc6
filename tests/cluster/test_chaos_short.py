"""The chaos script's short version: a few randomised fault trials (benchmarks/chaos.py) on a
real cluster; nothing acknowledged may be lost or duplicated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_short_chaos_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--trials", "3", "--seed", "5",
         "--batch", "200", "--no-settle", "--base", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    lines = result.stdout.strip().splitlines()
    assert "trials, acked, lost, duplicated" in lines, result.stdout + result.stderr[-3000:]
    trials, acked, lost, duplicated = (int(x) for x in lines[-1].split(","))
    assert (trials, lost, duplicated) == (3, 0, 0), result.stdout
    assert acked >= 3 * 400
    assert result.returncode == 0
