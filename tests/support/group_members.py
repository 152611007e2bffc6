"""Drive consumer-group members running in their own processes (tests/support/group_worker.py,
tests/node/group_worker.js) and collect what they report, for the group acceptance tests.

A `Member` is one worker process (client "java": tests/java/GroupMember.java, Apache Kafka's
own consumer; not in CLIENTS, a JVM is slow to start); a reader thread turns its JSON lines
into events. Helpers
produce numbered messages and wait for conditions with a deadline. Nothing here asserts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs"]


class Member:
    def __init__(
        self,
        client: str,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        session_timeout_ms: int = 6000,
        heartbeat_interval_ms: int = 1000,
        instance_id: str | None = None,
        strategy: str | None = None,
        protocol: str = "classic",
        java_config: dict[str, str] | None = None,
    ) -> None:
        if client == "java":
            from tests.support.java_clients import java_command

            kafka: dict[str, object] = {"group.protocol": protocol}
            if protocol == "classic":
                kafka.update({"session.timeout.ms": session_timeout_ms,
                              "heartbeat.interval.ms": heartbeat_interval_ms})
            if instance_id:
                kafka["group.instance.id"] = instance_id
            kafka.update(java_config or {})
            args = java_command("GroupMember", f"bootstrap={bootstrap}", f"topic={topic}",
                                f"group={group}", *(f"kafka.{k}={v}" for k, v in kafka.items()))
        elif client == "kafkajs":
            args = [
                "node",
                str(NODE_DIR / "group_worker.js"),
                bootstrap,
                topic,
                group,
                str(session_timeout_ms),
                str(heartbeat_interval_ms),
            ]
        else:
            args = [
                sys.executable,
                "-m",
                "tests.support.group_worker",
                client,
                bootstrap,
                topic,
                group,
                "--session-timeout-ms",
                str(session_timeout_ms),
                "--heartbeat-interval-ms",
                str(heartbeat_interval_ms),
                "--protocol",
                protocol,
            ]
            if instance_id:
                args += ["--instance-id", instance_id]
            if strategy:
                args += ["--strategy", strategy]
        self.client = client
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["at"] = time.monotonic()
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    @property
    def partitions(self) -> set[int]:
        assignments = [e for e in self.snapshot() if e["event"] == "assignment"]
        return set(assignments[-1]["partitions"]) if assignments else set()

    def assignment_events(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "assignment"]

    def values(self) -> list[str]:
        return [v for e in self.snapshot() if e["event"] == "records" for v in e["values"]]

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the worker closes its consumer (leaving the group) and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

        self._close_pipe()

    def kill(self) -> None:
        """SIGKILL: gone without a word to the broker."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __repr__(self) -> str:
        events = [{k: v for k, v in e.items() if k != "values"} for e in self.snapshot()]
        stderr = ""
        if not self._stderr.closed:
            self._stderr.seek(0)
            stderr = self._stderr.read()[-1500:].decode(errors="replace")
        return (
            f"<{self.client} pid {self.proc.pid} rc {self.proc.poll()} events {events}"
            f" stderr {stderr!r}>"
        )


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, members: list[Member] | None = None
) -> float:
    """Poll until `condition()`; returns the seconds it took, raises TimeoutError saying `what`
    (and what `members` reported)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"not within {timeout_s}s: {what}; members: {members}")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)


def produce_numbered(
    bootstrap: str, topic: str, partitions: int, first: int, count: int
) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    if producer.flush(30) != 0:
        raise RuntimeError("messages left unflushed")
    return {str(i) for i in range(first, first + count)}
