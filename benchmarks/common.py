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

__all__ = ["cpu_seconds", "cpu_split", "throwaway_standalone"]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None where /proc is unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _user_system(stat_path: str) -> tuple[float, float] | None:
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_split(pid: int) -> tuple[float, float, float, float] | None:
    """CPU seconds of process `pid` so far as (its first thread's user, system; the whole
    process's user, system), or None without /proc.  For a ledgerwire broker the first thread
    runs the Trio event loop, the others are worker threads (journal and entry-log writes and
    fsyncs); the process figures count threads that have exited too."""
    main = _user_system(f"/proc/{pid}/task/{pid}/stat")
    whole = _user_system(f"/proc/{pid}/stat")
    if main is None or whole is None:
        return None
    return main[0], main[1], whole[0], whole[1]


@contextmanager
def throwaway_standalone(extra_args: list[str] | None = None) -> Iterator[Standalone]:
    """A started standalone in a temporary directory, stopped and removed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        with running_standalone(Path(tmp) / "data", extra_args=extra_args) as server:
            yield server
