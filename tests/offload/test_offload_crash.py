"""kill -9 at every step of an offload (real durable bookie, on-disk store, a directory).

After the crash a new owner reads the whole log byte-identical; every ledger recorded as
offloaded points at a complete object (never a partial one); a ledger whose bookie copy is
gone is recorded as offloaded; no object is left that the metadata does not name (the new
owner deletes unfinished uploads). A second offload pass then finishes the job.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger_backend.managed_ledger.offloading import OFFLOAD_CRASH_POINTS
from tests.managed_ledger.crash_support import assert_stopped, run_driver
from tests.offload.offload_crash_driver import ENTRIES
from tests.support.ports import free_port


def run(data_dir: Path, port: int, phase: str, crash_at: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run_driver("tests.offload.offload_crash_driver", data_dir, port, phase, crash_at)


def crash_and_reopen(tmp_path: Path, place: str, crash_at: str | None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write, offload (killed at `crash_at`; `place` "-own": to the ledger's own directory),
    reopen as a new owner: its reports after the crash and after finishing the job."""
    port = free_port()
    written = run(tmp_path, port, "write")
    assert written.returncode == 0, written.stderr[-3000:]
    offloaded = run(tmp_path, port, "offload" + place, crash_at)
    assert_stopped(offloaded, crash_at)
    verified = run(tmp_path, port, "verify" + place)
    assert verified.returncode == 0, verified.stderr[-3000:]
    after_crash, finished = (json.loads(line) for line in verified.stdout.strip().splitlines())
    return after_crash, finished


def check(state: dict[str, Any]) -> None:
    assert state["entries"] == [f"entry-{i}" for i in range(ENTRIES)]
    # the reopen swept unfinished uploads: exactly the recorded objects remain
    assert state["offload_pending"] == [] and state["objects"] == len(state["offloaded"])
    for item in state["offloaded"]:
        assert item["object_size"] == item["recorded_size"], item  # complete, never partial
        if item["bookie_deleted"]:
            assert not item["on_bookies"], item


@pytest.mark.timeout(300)
@pytest.mark.parametrize("crash_at", [*OFFLOAD_CRASH_POINTS, None])
def test_an_offload_killed_at_any_step_loses_nothing(tmp_path: Path, crash_at: str | None
                                                     ) -> None:
    after_crash, finished = crash_and_reopen(tmp_path, "", crash_at)
    check(after_crash)
    if crash_at in ("managed_ledger.offload.after_intent", "managed_ledger.offload.after_put",
                    "managed_ledger.offload.after_verify"):
        assert after_crash["offloaded"] == []  # the old state: nothing recorded
    if crash_at == "managed_ledger.offload.after_bookie_delete":
        gone = [i for i in after_crash["offloaded"] if not i["on_bookies"]]
        assert len(gone) == 1 and not gone[0]["bookie_deleted"]  # served from the object
    check(finished)
    assert len(finished["offloaded"]) == finished["ledgers"] - 1
    assert all(i["bookie_deleted"] and not i["on_bookies"] for i in finished["offloaded"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("crash_at", ["managed_ledger.offload.after_intent",
                                      "managed_ledger.offload.after_put",
                                      "managed_ledger.offload.after_verify"])
def test_an_offload_to_a_place_of_its_own_killed_before_recording_leaves_no_orphan(
        tmp_path: Path, crash_at: str) -> None:
    """The offload goes to a directory of the managed ledger's own (a namespace's
    offload_directory), not the configured one, and is killed after storing its object but
    before recording it: the pending key carries where the object went, so the next owner's
    sweep deletes it there.  Without the place, the sweep looked in the configured directory
    and the object stayed, named by nothing."""
    after_crash, finished = crash_and_reopen(tmp_path, "-own", crash_at)
    assert after_crash["offloaded"] == []
    check(after_crash)  # no object is left that the metadata does not name
    check(finished)
    assert len(finished["offloaded"]) == finished["ledgers"] - 1
