"""The CLI's Spark session: quiet by default, its Java and py4j output in a log file, UI on.

`start_session(master, app, log)` starts (or reuses) a SparkSession for `ledgerwire replay` /
`backfill`. Unless `log.verbose`, the JVM is started with the process's stderr pointed at the
log file (the JVM, its log4j console output and the Python workers it forks keep that file as
their stderr), and Python's own loggers (py4j, kazoo) write there too; the user's terminal sees
only ledgerwire's lines. `failure_line(exc)` turns whatever a job raised (OptionError, a Spark
or py4j exception wrapping a data source error) into the one line to print; the full stack goes
to the log file, which the line names.

This module must never print a stack to stderr unless verbose, and never change Spark options
the user set through spark-defaults or the environment except those listed in `_DEFAULTS`.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_bridge.options import OptionError

_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",  # the CLI prints its own progress line
    "spark.sql.shuffle.partitions": "8",
}


_QUIET_LOGGERS = ("py4j", "kazoo", "ledger_backend", "spark_bridge", "ledgerwire")


@dataclass
class RunLog:
    """Where a run's Spark/py4j output and stacks go."""

    path: Path
    verbose: bool = False

    @classmethod
    def create(cls, command: str, verbose: bool, path: str | None = None) -> RunLog:
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            path = os.path.join(tempfile.gettempdir(),
                                f"ledgerwire-{command}-{stamp}-{os.getpid()}.log")
        log = cls(Path(path), verbose)
        log.path.parent.mkdir(parents=True, exist_ok=True)
        log.path.touch()
        if not verbose:
            handler = logging.FileHandler(log.path)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s"))
            for name in _QUIET_LOGGERS:
                logger = logging.getLogger(name)
                for old in [h for h in logger.handlers if getattr(h, "ledgerwire_run", False)]:
                    logger.removeHandler(old)  # an earlier run in this process
                    old.close()
                handler.ledgerwire_run = True  # type: ignore[attr-defined]
                logger.addHandler(handler)
                logger.propagate = False
                logger.setLevel(logging.INFO)
        return log

    def write_stack(self, exc: BaseException) -> None:
        with self.path.open("a") as f:
            f.write("\n---- ledgerwire: the job's failure ----\n")
            f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


SHIPPED_PACKAGES = ("spark_bridge", "ledger_backend", "protocols")


def bridge_zip(directory: str | None = None) -> Path:
    """A zip of the bridge's own code (spark_bridge, ledger_backend, protocols: .py files, and
    bulk_records.c, compiled where it runs) for `spark.submit.pyFiles` / `--py-files` /
    `addPyFile`, so that executors whose Python lacks ledgerwire still run the job (they need
    its third-party dependencies: pyarrow, trio, kazoo, the codecs). Written to `directory`
    (default: a new temp directory)."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    folder = Path(directory or tempfile.mkdtemp(prefix="ledgerwire-pyfiles-"))
    out = folder / "ledgerwire-bridge.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in SHIPPED_PACKAGES:
            for source in sorted([*(root / package).rglob("*.py"),
                                  *(root / package).rglob("*.c")]):  # fmt: skip
                zf.write(source, source.relative_to(root).as_posix())
    return out


def _getOrCreate(builder: Any, log: RunLog) -> Any:
    if log.verbose:
        return builder.getOrCreate()
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(log.path, os.O_WRONLY | os.O_APPEND)
    try:
        os.dup2(target, 2)  # the JVM child inherits this stderr for its whole life
        return builder.getOrCreate()
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def start_session(master: str, app: str, log: RunLog, *, ui: bool = True, ship_code: bool = True,
                  conf: dict[str, str] | None = None) -> tuple[Any, bool]:
    """A session (an active one is reused, e.g. in tests) and whether we created it. A local
    master runs workers with this interpreter; on a cluster the workers' own Python
    (PYSPARK_PYTHON / spark.pyspark.python, else Spark's default) runs them, and with
    ship_code the bridge's zip is added to the job (bridge_zip)."""
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_bridge

    active = SparkSession.getActiveSession()
    if active is not None:
        spark_bridge.register(active)
        return active, False
    builder = SparkSession.builder.master(master).appName(app)
    settings = dict(_DEFAULTS)
    if not ui:
        settings["spark.ui.enabled"] = "false"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = _getOrCreate(builder, log)
    spark.sparkContext.setLogLevel("INFO" if log.verbose else "WARN")
    if ship_code:
        spark.sparkContext.addPyFile(str(bridge_zip()))
    spark_bridge.register(spark)
    return spark, True


def ui_address(spark: Any) -> str | None:
    try:
        url = spark.sparkContext.uiWebUrl
    except Exception:  # noqa: BLE001 - no UI is not an error
        return None
    return str(url) if url else None


def output_bytes(spark: Any, uri: str) -> int:
    """Bytes under a file or directory on any Hadoop filesystem (file:, hdfs:, s3a:, ...),
    measured through the session's Hadoop configuration."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return int(fs.getContentSummary(path).getLength())


_OPTION = re.compile(r"OptionError: (.+)")
_REACH = re.compile(r"(cannot reach [^\n]+)")
_PY_ERROR = re.compile(r"^\s*([A-Za-z_.]*(?:Error|Exception)): (.+)$", re.MULTILINE)


def failure_line(exc: BaseException) -> tuple[str, int]:
    """(one line naming the cause, exit code): 2 for an option error, else 1."""
    if isinstance(exc, OptionError):  # raised on the driver itself (the writer's checks)
        return str(exc), 2
    text = str(exc)
    found = _OPTION.search(text)
    if found is not None:
        return found.group(1).strip(), 2
    found = _REACH.search(text)
    if found is not None:
        return found.group(1).strip(), 1
    if "PYTHON_DATA_SOURCE_ERROR" in text or "Traceback (most recent call last)" in text:
        errors = _PY_ERROR.findall(text)
        if errors:
            name, message = errors[-1]
            return f"{name.rsplit('.', 1)[-1]}: {message.strip()}", 1
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if len(first) > 300:
        first = first[:300] + "..."
    return f"job failed: {first}", 1


__all__ = ["SHIPPED_PACKAGES", "RunLog", "bridge_zip", "failure_line", "output_bytes",
           "start_session", "ui_address"]
