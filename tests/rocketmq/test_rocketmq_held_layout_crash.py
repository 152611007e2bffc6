"""kill -9 at each step of moving held RocketMQ messages into the bundles' layout
(gateway/rocketmq/held_layout.py), as the supervisor does at start: after the next start's move
runs to its end, every waiting delayed message and undecided half message is held once where
the bundles read it, and the layout is recorded; a second kill during the repeated move changes
nothing either (real durable bookie, on-disk store)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.rocketmq.held_layout_crash_driver import UNDECIDED, in_bundles, where
from tests.support.ports import free_port

DRIVER = "tests.rocketmq.held_layout_crash_driver"
APPEND, POSITION, DECISIONS, RECORD = (
    "held_layout.after_append", "held_layout.after_position", "held_layout.after_decisions",
    "held_layout.before_record")
# the delayed copies go to 1 + 16 partitions (d1, d4, d10-*), then the positions of
# partitions 0, 3 and 9 pass them, then the half copy and its decision
STEPS = [(APPEND, 1), (APPEND, 9), (POSITION, 1), (POSITION, 3), (APPEND, 18),
         (DECISIONS, 1), (RECORD, 1)]


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None,
        after: int = 1) -> subprocess.CompletedProcess[str]:
    return run_driver(DRIVER, data_dir, port, phase, crash_at, after)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("crash_at", "after"), [*STEPS, (None, 1)])
def test_a_move_killed_at_any_step_loses_and_repeats_nothing(
        tmp_path: Path, crash_at: str | None, after: int) -> None:
    port = free_port()
    assert_stopped(run(tmp_path, port, "legacy"), None)
    assert_stopped(run(tmp_path, port, "move", crash_at, after), crash_at)
    if crash_at is not None:
        if crash_at != RECORD:  # the next start moves again; killed once more at a copy
            assert_stopped(run(tmp_path, port, "move", APPEND, 1),
                           None if crash_at == DECISIONS else APPEND)
        assert_stopped(run(tmp_path, port, "move"), None)
    done = run(tmp_path, port, "verify")
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state == {"waiting": {k: list(v) for k, v in in_bundles().items()},
                     "undecided": {k: list(where(v)) for k, v in UNDECIDED.items()},
                     "layout": 16}
