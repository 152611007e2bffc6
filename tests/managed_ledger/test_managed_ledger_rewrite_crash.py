"""kill -9 at every step of a managed-ledger rewrite (real durable bookie, on-disk store).

After the crash a new owner opens the managed ledger: the log is whole (every key's latest
update is there, in order, nothing doubled), the node has no pending or garbage ids left, and
no ledger is leaked: the ledger client knows exactly the listed ledgers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ledger_backend.managed_ledger import REWRITE_CRASH_POINTS
from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.managed_ledger.rewrite_crash_driver import KEYS, UPDATES
from tests.support.ports import free_port


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run_driver("tests.managed_ledger.rewrite_crash_driver", data_dir, port, phase,
                      crash_at)


def latest_per_key(entries: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        key, value = entry.split("=")
        out[key] = value
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("crash_at", [*REWRITE_CRASH_POINTS, None])
def test_a_rewrite_killed_at_any_step_leaves_a_whole_log(tmp_path: Path,
                                                          crash_at: str | None) -> None:
    port = free_port()
    written = run(tmp_path, port, "write")
    assert written.returncode == 0, written.stderr[-3000:]
    compacted = run(tmp_path, port, "compact", crash_at)
    assert_stopped(compacted, crash_at)
    verified = run(tmp_path, port, "verify")
    assert verified.returncode == 0, verified.stderr[-3000:]
    state = json.loads(verified.stdout.strip().splitlines()[-1])
    entries = state["entries"]
    want = {f"k{key}": str(UPDATES - 1) for key in range(KEYS)}
    assert latest_per_key(entries) == want
    assert len(entries) == len(set(entries))  # nothing doubled
    positions = {e: i for i, e in enumerate(entries)}
    for key in range(KEYS):  # updates of one key stay in order
        seen = [positions[f"k{key}={u}"] for u in range(UPDATES) if f"k{key}={u}" in positions]
        assert seen == sorted(seen)
    assert state["pending"] == [] and state["garbage"] == []
    assert state["known"] == sorted(state["listed"])
    if crash_at in (None, "managed_ledger.rewrite.after_swap",
                    "managed_ledger.rewrite.after_delete"):
        assert len(entries) < KEYS * UPDATES  # the rewrite took effect
    else:
        assert len(entries) == KEYS * UPDATES  # the old list stands
