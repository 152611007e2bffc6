"""A module imports in a fresh interpreter whatever was imported before it.

test_import_layers.py checks the import graph of modules, but importing `a.b.c` first runs
the package `a.b`'s `__init__`, which the graph does not count: ledger_backend.faults imports
managed_ledger.types, whose package imports ledger_finishing, which needs faults.  A `from
ledger_backend.faults import log_failure` there failed ("partially initialized module") in any
process whose first ledger-backend import was faults, or a module that starts with it (the
cluster's ownership service, auto-recovery); the test suite hid it by importing the managed
ledger first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", [
    "ledger_backend.faults",
    "ledger_backend.autorecovery.auditor",
    "gateway.cluster.ownership",
])
def test_a_module_imported_first_in_a_fresh_interpreter_loads(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
