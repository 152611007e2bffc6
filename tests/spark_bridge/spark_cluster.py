"""A real Spark standalone cluster for tests: a master and workers from the pyspark wheel.

`SparkCluster(tmp, workers=2)` starts `spark-class org.apache.spark.deploy.master.Master` and
one `...worker.Worker` per worker (one core, small memory, its own work directory) on
127.0.0.1, waits until the master's JSON page lists them all ALIVE, and `stop()` terminates
every process it started (kill after a grace period). Executors' logs land in
<work dir>/<app id>/<executor id>/stderr, which the tests read to see where tasks ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
from support.standalone import REPO, free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def python_without_ledgerwire(directory: Path) -> tuple[Path, Path]:
    """A Python for Spark's workers that cannot import ledgerwire (python -S: no editable
    install; the repository removed from PYTHONPATH; site-packages kept for pyspark, pyarrow,
    trio, kazoo), and the file it touches each time it starts (so a test can tell that the
    workers really ran it)."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    marker = directory / "python-without-ledgerwire.ran"
    wrapper = directory / "python-without-ledgerwire"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"touch '{marker}'\n"
        f"PYTHONPATH=\"$(printf '%s' \"$PYTHONPATH\" | tr ':' '\\n' | grep -v -x -F "
        f"-e '{REPO}' -e '{REPO}/' | paste -sd: -):{site}\"\n"
        "export PYTHONPATH\n"
        f"exec {sys.executable} -S \"$@\"\n")  # fmt: skip
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-c", "import spark_bridge"], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                           cwd=directory)  # fmt: skip
    assert "No module named 'spark_bridge'" in probe.stderr, probe.stderr
    marker.unlink()
    return wrapper, marker


class SparkCluster:
    def __init__(self, tmp: Path, *, workers: int = 2, worker_memory: str = "640m") -> None:
        self.tmp = tmp
        self.port = free_port()
        self.ui_port = free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.work_dirs = [tmp / f"worker-{i}" for i in range(workers)]
        self.worker_memory = worker_memory

    def _spawn(self, name: str, *args: str) -> None:
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_DAEMON_MEMORY="256m",
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")  # fmt: skip
        with (self.tmp / f"{name}.log").open("wb") as log:  # the child keeps its own copy
            self.procs.append(subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args], env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip

    def start(self, timeout_s: float = 180.0) -> None:
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))  # fmt: skip
        for i, work in enumerate(self.work_dirs):
            self._spawn_worker(i, work)
        self.wait_alive(timeout_s)

    def _spawn_worker(self, i: int, work: Path) -> None:
        work.mkdir(parents=True)
        self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                    "127.0.0.1", "--cores", "1", "--memory", self.worker_memory,
                    "--webui-port", str(free_port()), "--work-dir", str(work),
                    self.master)  # fmt: skip

    def add_worker(self, timeout_s: float = 180.0) -> None:
        """One more one-core worker (a running application gets an executor there too)."""
        work = self.tmp / f"worker-{len(self.work_dirs)}"
        self.work_dirs.append(work)
        self._spawn_worker(len(self.work_dirs) - 1, work)
        self.wait_alive(timeout_s)

    def wait_alive(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.alive_workers() == len(self.work_dirs):
                return
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited early: {proc.args}")
            time.sleep(1)
        raise TimeoutError(f"{len(self.work_dirs)} workers not ALIVE within {timeout_s} s")

    def alive_workers(self) -> int:
        try:
            url = f"http://127.0.0.1:{self.ui_port}/json/"
            with urllib.request.urlopen(url, timeout=5) as response:
                doc = json.load(response)
        except OSError:
            return 0
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def tasks_per_worker(self) -> list[int]:
        """'Running task' lines in each worker's executor logs (all applications)."""
        counts = []
        for work in self.work_dirs:
            count = 0
            for stderr in work.glob("*/*/stderr"):
                count += stderr.read_text(errors="replace").count("Running task ")
            counts.append(count)
        return counts

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
