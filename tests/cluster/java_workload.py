"""Apache Kafka's Java producer (kafka-clients 4.x, its defaults: idempotent, acks=all) as a
background workload for the chaos benchmark, beside the confluent-kafka ProduceRun.

It runs tests/java/ChaosProduce.java in its own JVM and records, like ProduceRun, which values
were acknowledged (with the time each acknowledgement was read and its partition) and which
failed, by the client's exception class.  Stopping closes the program's stdin; it then flushes
and exits.  This module never starts or stops brokers and never retries a send itself.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.kafka_workload import longest_pause_after
from tests.support.java_clients import java_command


@dataclass
class JavaProduceRun:
    bootstrap: str
    topic: str
    run_id: str = "j"
    rate_per_s: float = 100.0
    log_path: Path | None = None  # the JVM's stderr (default: discarded)
    acked: list[str] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    ack_partitions: list[int] = field(default_factory=list)
    error_codes: Counter[str] = field(default_factory=Counter)  # failed sends by exception
    failed: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    _proc: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None

    def start(self) -> JavaProduceRun:
        argv = java_command("ChaosProduce", f"bootstrap={self.bootstrap}", f"topic={self.topic}",
                            f"run={self.run_id}", f"rate={self.rate_per_s}")
        stderr = self.log_path.open("ab") if self.log_path is not None else subprocess.DEVNULL
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=stderr, text=True)
        if self.log_path is not None:
            stderr.close()  # type: ignore[union-attr]
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            kind = event.get("event")
            if kind == "ack":
                self.ack_times.append(time.monotonic())
                self.ack_partitions.append(int(event["partition"]))
                self.acked.append(event["value"])
            elif kind == "failed":
                self.error_codes[event["error"]] += 1
                self.failed.append(event["value"])
            elif kind == "config":
                self.config = event

    def stop(self, timeout_s: float = 180.0) -> None:
        if self._proc is None:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._reader is not None:
            self._reader.join(30)

    def acked_since(self, t: float) -> int:
        return sum(1 for at in list(self.ack_times) if at >= t)

    def longest_pause_after(self, t: float) -> float | None:
        """The longest any partition went without an acknowledgement from `t` on."""
        return longest_pause_after(list(self.ack_times), list(self.ack_partitions), t)
