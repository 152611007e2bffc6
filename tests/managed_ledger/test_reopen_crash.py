"""kill -9 at each step of a new owner's one-transaction list write (factory._list_next_ledger)
after the previous owner was killed with its ledger open: the new ledger and the list naming
it are written together or not at all (no ledger named nowhere), the previous ledger is
fenced and closed at its real end before that write, and the next owner reads every
acknowledged entry once, in order (real durable bookie, on-disk store)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from ledger_backend.managed_ledger.factory import OPEN_CRASH_POINTS
from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.managed_ledger.reopen_crash_driver import ENTRIES
from tests.support.ports import free_port


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run_driver("tests.managed_ledger.reopen_crash_driver", data_dir, port, phase,
                      crash_at)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("crash_at", [*OPEN_CRASH_POINTS, None])
def test_a_reopen_killed_at_any_step_loses_nothing(tmp_path: Path, crash_at: str | None) -> None:
    port = free_port()
    written = run(tmp_path, port, "write")
    assert "ACKED" in written.stdout and written.returncode == -signal.SIGKILL, \
        written.stderr[-3000:]
    reopened = run(tmp_path, port, "reopen", crash_at)
    assert_stopped(reopened, crash_at)
    verified = run(tmp_path, port, "verify")
    assert verified.returncode == 0, verified.stderr[-3000:]
    state = json.loads(verified.stdout.strip().splitlines()[-1])
    acked = [f"e{i}" for i in range(ENTRIES + (crash_at is None))]
    assert state["entries"] == acked  # all, once, in order
    records, states = state["records"], state["states"]
    first = records[0][0]
    # the crashed writer's ledger was fenced and closed at its end before any list write
    assert states[str(first)] == "CLOSED"
    if crash_at == OPEN_CRASH_POINTS[0]:  # nothing written: the list as the writer left it
        assert records == [[first, 0, False]]
    else:  # the recovered end and the new ledger, from the one transaction
        ((_, entries, closed), (second, _, _)) = records
        assert (entries, closed) == (ENTRIES, True) and second > first
    # every ledger the store holds is listed (none created and named nowhere)
    assert state["stored"] == [r[0] for r in records]
