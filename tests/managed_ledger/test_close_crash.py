"""kill -9 at each step of the one-transaction close (managed_ledger._close_and_record): the
ledger's CLOSED state and the list recording it are written together or not at all, and a new
owner reads every acknowledged entry once, in order (real durable bookie, on-disk store)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ledger_backend.managed_ledger.managed_ledger import CLOSE_CRASH_POINTS
from tests.managed_ledger.close_crash_driver import ENTRIES
from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.support.ports import free_port


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run_driver("tests.managed_ledger.close_crash_driver", data_dir, port, phase,
                      crash_at)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("crash_at", [*CLOSE_CRASH_POINTS, None])
def test_a_close_killed_at_any_step_loses_nothing(tmp_path: Path, crash_at: str | None) -> None:
    port = free_port()
    written = run(tmp_path, port, "write", crash_at)
    assert "ACKED" in written.stdout, written.stderr[-3000:]
    assert_stopped(written, crash_at)
    verified = run(tmp_path, port, "verify")
    assert verified.returncode == 0, verified.stderr[-3000:]
    state = json.loads(verified.stdout.strip().splitlines()[-1])
    assert state["entries"] == [f"e{i}" for i in range(ENTRIES)]  # all, once, in order
    ((_, entries, closed),) = state["records"]
    if crash_at == "managed_ledger.close.before_record":  # neither write: recovered on open
        assert (closed, state["last_state"]) == (False, "OPEN")
    else:  # both, from the one transaction
        assert (entries, closed, state["last_state"]) == (ENTRIES, True, "CLOSED")
