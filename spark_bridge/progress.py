"""A progress line for `ledgerwire replay` / `backfill` while Spark runs the job.

`Progress(spark, total_records, stream)` polls in a daemon thread: records and bytes written so
far come from Spark's monitoring REST API (the UI's /api/v1: the stages' outputRecords and
outputBytes; a Parquet write reports a task's rows when the task ends), and at least the share
of finished tasks (StatusTracker) times the planned record count; so the line moves per finished
task, not within one. On a terminal one line is rewritten in place every second; otherwise a
plain line is printed per interval (30 s by default), so that a log collector sees the job move.

This module must never fail the job: any error while polling skips that poll.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass
class Snapshot:
    records: int
    nbytes: int
    tasks_done: int
    tasks: int


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):  # NaN or no rate yet
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(snap: Snapshot, total: int | None, elapsed: float) -> str:
    rate = snap.records / elapsed if elapsed > 0 else 0.0
    parts = [f"{snap.records:,}" + (f"/{total:,}" if total else "") + " records",
             f"{snap.nbytes / 1e6:,.1f} MB", f"{rate:,.0f} records/s",
             f"tasks {snap.tasks_done}/{snap.tasks}"]  # fmt: skip
    if total:
        left = max(total - snap.records, 0)
        parts.append("ETA " + _fmt_eta(left / rate if rate > 0 else float("inf")))
    return ", ".join(parts)


class Progress:
    """Use as a context manager around the action that runs the job."""

    def __init__(self, spark: Any, total_records: int | None, stream: TextIO, *,
                 interval_s: float | None = None) -> None:  # fmt: skip
        self.spark = spark
        self.total = total_records
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval_s = interval_s if interval_s is not None else (1.0 if self.tty else 30.0)
        self.ui = spark.sparkContext.uiWebUrl
        self.app_id = spark.sparkContext.applicationId
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerwire-progress",
                                        daemon=True)  # fmt: skip
        self._shown = False
        self._baseline = (0, 0)

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        try:  # stages of earlier jobs in a reused session do not count
            self._baseline = self._totals()
        except Exception:  # noqa: BLE001 - progress must never fail the job
            self._baseline = (0, 0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()

    def snapshot(self) -> Snapshot:
        tracker = self.spark.sparkContext.statusTracker()
        tasks = done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                tasks += info.numTasks
                done += info.numCompletedTasks
        records, nbytes = self._totals()
        records -= self._baseline[0]
        nbytes -= self._baseline[1]
        if self.total and tasks:  # Parquet reports a task's rows only when it ends
            records = max(records, self.total * done // tasks)
        return Snapshot(records, nbytes, done, tasks)

    def _totals(self) -> tuple[int, int]:
        """Output records and bytes of all the application's stages (REST API), or zeros."""
        records = nbytes = 0
        if self.ui:
            url = f"{self.ui}/api/v1/applications/{self.app_id}/stages"
            with urllib.request.urlopen(url, timeout=5) as response:
                for stage in json.load(response):
                    records += int(stage.get("outputRecords", 0))
                    nbytes += int(stage.get("outputBytes", 0))
        return records, nbytes

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                snap = self.snapshot()
            except Exception:  # noqa: BLE001 - progress must never fail the job
                continue
            if snap.tasks == 0 and snap.records == 0:
                continue
            line = progress_line(snap, self.total, time.monotonic() - self.started)
            if self.tty:
                self.stream.write("\r\033[K" + line)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
            self._shown = True


__all__ = ["Progress", "Snapshot", "progress_line"]
