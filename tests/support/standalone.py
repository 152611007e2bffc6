"""Run `ledgerwire standalone` as a real subprocess for integration tests.

The tests talk to it only over its Kafka port, as a user's client would, and may kill it
with SIGKILL to check what survives. `source` runs the broker from another checkout of the
project (benchmarks compare a change with its parent in one run).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .ports import distinct_free_ports, free_port, free_port_range

REPO = Path(__file__).resolve().parents[2]

__all__ = ["Standalone", "distinct_free_ports", "free_port", "free_port_range"]


class Standalone:
    """One `ledgerwire standalone` process with its own data dir and ports."""

    def __init__(self, data_dir: Path, *, bookies: int = 1, extra_args: list[str] | None = None,
                 source: Path | None = None):
        self.data_dir = data_dir
        self.source = source or REPO
        self.bookies = bookies
        self.bookie_port = free_port_range(bookies)
        taken = set(range(self.bookie_port, self.bookie_port + bookies))
        (self.kafka_port, self.admin_port, self.name_server_port, self.rocketmq_broker_port,
         self.rocketmq_grpc_port) = distinct_free_ports(5, taken)
        self.extra_args = list(extra_args or [])
        self.log_path = data_dir.parent / f"{data_dir.name}-standalone.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout_s: float = 60.0) -> None:
        args = [
            sys.executable, "-m", "gateway", "standalone",
            "--data-dir", str(self.data_dir),
            "--kafka-listener", f"127.0.0.1:{self.kafka_port}",
            "--bookies", str(self.bookies),
            "--bookie-port", str(self.bookie_port),
            "--log-format", "text",
            "--admin-listener", f"127.0.0.1:{self.admin_port}",
            "--rocketmq-name-server-listener", f"127.0.0.1:{self.name_server_port}",
            "--rocketmq-broker-listener", f"127.0.0.1:{self.rocketmq_broker_port}",
            "--rocketmq-grpc-listener", f"127.0.0.1:{self.rocketmq_grpc_port}",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        log_start = log.tell()  # earlier runs' lines stay in the file: look only past them
        env = dict(os.environ)
        if self.source != REPO:
            env["PYTHONPATH"] = str(self.source)
        self.proc = subprocess.Popen(args, cwd=self.source, stdout=log, stderr=log, env=env)
        log.close()
        deadline = time.monotonic() + timeout_s
        accepting_since: float | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.proc.returncode}:\n{self.log()}")
            if b"standalone ready" in self.log_path.read_bytes()[log_start:]:
                return  # every listener is up (Kafka's comes first: its port alone is not enough)
            if accepting_since is None and self._accepts():
                accepting_since = time.monotonic()
            if accepting_since is not None and time.monotonic() - accepting_since > 10:
                return  # a --log-level above INFO filters the ready line
            time.sleep(0.05)
        self.proc.kill()  # never leave a half-started broker behind a failed test
        self.proc.wait()
        raise RuntimeError(f"standalone did not become ready in {timeout_s:.0f} s:\n{self.log()}")

    def _accepts(self) -> bool:
        """The Kafka port takes connections (the ready line may be filtered by --log-level)."""
        try:
            with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=0.2):
                return True
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:]

    def stop(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"standalone ignored SIGTERM:\n{self.log()}") from None
        return self.proc.returncode

    def admin(self, *args: str) -> Any:
        """`ledgerwire admin ARGS --json` against this standalone's admin API, parsed."""
        done = subprocess.run([sys.executable, "-m", "gateway", "admin", *args, "--admin-url",
                               f"http://127.0.0.1:{self.admin_port}", "--json"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def running_standalone(data_dir: Path, *, extra_args: list[str] | None = None,
                       ) -> Iterator[Standalone]:
    """A started Standalone, stopped on exit unless a test already stopped or killed it."""
    server = Standalone(data_dir, extra_args=extra_args)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
