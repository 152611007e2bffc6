"""What the benchmarks share: a throwaway `ledgerwire standalone` and a process's CPU time.

Benchmarks import this as ``from common import ...`` (each script puts benchmarks/ on
sys.path) after putting the repository root on sys.path for tests.support.

This module must never print figures or choose what a benchmark measures.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.standalone import Standalone, running_standalone

__all__ = ["cpu_seconds", "throwaway_standalone"]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None where /proc is unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def throwaway_standalone(extra_args: list[str] | None = None) -> Iterator[Standalone]:
    """A started standalone in a temporary directory, stopped and removed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        with running_standalone(Path(tmp) / "data", extra_args=extra_args) as server:
            yield server
