"""kill -9 at each step of moving a data directory's single coordinator ledgers into the
partition ledgers (gateway/coordinator/single_ledger_migration.py): after the next start's move
runs to its end, every partition ledger holds exactly what the single ledgers held for its keys
(over older entries for the same keys, beside entries for others), nothing sits in a partition
it does not belong to, and the single ledgers are gone.  A second kill during the repeated move
changes nothing either (real durable bookie, on-disk store)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gateway.coordinator.single_ledger_migration import CRASH_POINTS
from tests.gateway.single_ledger_crash_driver import expected
from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.support.ports import free_port

AFTER_PARTITION, BEFORE_DELETE, AFTER_DELETE = CRASH_POINTS
# (crash point, its hit): the offsets' partitions are hits 1-8 of after_partition, the
# transactions' follow; before/after_delete hit once for offsets, then for transactions
STEPS = [(AFTER_PARTITION, 1), (AFTER_PARTITION, 4), (AFTER_PARTITION, 11),
         (BEFORE_DELETE, 1), (BEFORE_DELETE, 2), (AFTER_DELETE, 1), (AFTER_DELETE, 2)]


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None,
        after: int = 1) -> subprocess.CompletedProcess[str]:
    return run_driver("tests.gateway.single_ledger_crash_driver", data_dir, port, phase,
                      crash_at, after)


def verified(data_dir: Path, port: int) -> dict[str, object]:
    done = run(data_dir, port, "verify")
    assert done.returncode == 0, done.stderr[-3000:]
    state: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return state


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("crash_at", "after"), [*STEPS, (None, 1)])
def test_a_move_killed_at_any_step_loses_and_repeats_nothing(
        tmp_path: Path, crash_at: str | None, after: int) -> None:
    port = free_port()
    assert_stopped(run(tmp_path, port, "legacy"), None)
    assert_stopped(run(tmp_path, port, "move", crash_at, after), crash_at)
    if crash_at is not None:
        # the next start moves again; killed once more at its first partition's record
        assert_stopped(run(tmp_path, port, "move", AFTER_PARTITION, 1),
                       None if crash_at == AFTER_DELETE and after == 2 else AFTER_PARTITION)
        assert_stopped(run(tmp_path, port, "move"), None)
    assert verified(tmp_path, port) == expected()
