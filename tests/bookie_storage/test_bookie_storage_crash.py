"""Crash tests: kill a process running the engine at each crash point and at random moments,
then check that every acknowledged entry reads back byte-identical and fences survived."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from ledger_backend.bookie.crash_points import CRASH_POINT_NAMES
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import LedgerFencedError

sys.path.insert(0, str(Path(__file__).parent))
from bookie_crash_driver import crash_config, entry_payload  # noqa: E402

DRIVER = Path(__file__).parent / "bookie_crash_driver.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@dataclass
class Acknowledged:
    entries: set[tuple[int, int]] = field(default_factory=set)
    fenced: set[int] = field(default_factory=set)

    def absorb(self, stdout: str) -> None:
        for line in stdout.splitlines():
            parts = line.split()
            if parts and parts[0] == "A":
                self.entries.add((int(parts[1]), int(parts[2])))
            elif parts and parts[0] == "F":
                self.fenced.add(int(parts[1]))


def driver_env(crash_at: str | None = None, after: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LEDGERWIRE_CRASH_AT", None)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if crash_at is not None:
        env["LEDGERWIRE_CRASH_AT"] = crash_at
        env["LEDGERWIRE_CRASH_AFTER"] = str(after)
    return env


def run_driver(
    data_dir: Path, run_id: int, env: dict[str, str], seconds: float = 20.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DRIVER), str(data_dir), str(run_id), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_and_kill(data_dir: Path, run_id: int, delay_s: float) -> tuple[str, int]:
    """Start the driver, SIGKILL it delay_s after it opened the engine."""
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), str(data_dir), str(run_id), "60"],
        env=driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.strip() == "OPEN", first
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    stdout, _ = proc.communicate(timeout=60)
    return first + stdout, proc.returncode


async def verify(data_dir: Path, acked: Acknowledged, caplog: pytest.LogCaptureFixture) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ledger_backend.bookie.storage"):
        async with open_bookie_storage(crash_config(data_dir)) as storage:
            for ledger, entry in sorted(acked.entries):
                assert await storage.read_entry(ledger, entry) == entry_payload(ledger, entry), (
                    f"acknowledged entry {ledger}:{entry} differs after restart"
                )
            for ledger in acked.fenced:
                assert storage.is_fenced(ledger)
                with pytest.raises(LedgerFencedError):
                    await storage.add_entry(ledger, 99, 4, b"after fence")
            assert storage.replay_stop is not None
    assert "journal replay from" in caplog.text and " at journal file " in caplog.text


@pytest.mark.parametrize("crash_at", CRASH_POINT_NAMES)
async def test_acknowledged_entries_survive_crash_point(
    tmp_path: Path, crash_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "bookie"
    acked = Acknowledged()
    result = await trio.to_thread.run_sync(run_driver, data_dir, 1, driver_env(crash_at, 3))
    acked.absorb(result.stdout)
    assert result.returncode == -signal.SIGKILL, (
        f"crash point {crash_at} was not reached: rc={result.returncode}\n{result.stderr[-3000:]}"
    )
    assert "OPEN" in result.stdout and "CLOSED" not in result.stdout
    await verify(data_dir, acked, caplog)
    # the engine carries on after recovery: a second life, killed at the same point again
    result = await trio.to_thread.run_sync(run_driver, data_dir, 2, driver_env(crash_at, 2))
    acked.absorb(result.stdout)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    await verify(data_dir, acked, caplog)


async def test_acknowledged_entries_survive_random_sigkill(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "bookie"
    acked = Acknowledged()
    rng = random.Random(os.environ.get("LEDGERWIRE_CRASH_SEED", "7"))
    for run_id in range(1, 4):
        delay = rng.uniform(0.2, 1.5)
        stdout, returncode = await trio.to_thread.run_sync(run_and_kill, data_dir, run_id, delay)
        acked.absorb(stdout)
        assert returncode == -signal.SIGKILL
        await verify(data_dir, acked, caplog)
    assert len(acked.entries) > 50


async def test_clean_shutdown_replays_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "bookie"
    result = await trio.to_thread.run_sync(run_driver, data_dir, 1, driver_env(), 0.5)
    assert result.returncode == 0 and "CLOSED" in result.stdout, result.stderr[-3000:]
    acked = Acknowledged()
    acked.absorb(result.stdout)
    async with open_bookie_storage(crash_config(data_dir)) as storage:
        assert storage.replayed_records == 0
        for ledger, entry in sorted(acked.entries):
            assert await storage.read_entry(ledger, entry) == entry_payload(ledger, entry)
