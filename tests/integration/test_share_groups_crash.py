"""Share-group state survives kill -9 of the standalone in the middle of the work: a Java
KafkaShareConsumer keeps accepting records while the broker is killed and restarted twice;
afterwards every record was accepted, and none whose acceptance the broker confirmed (a
commitSync without error) was ever delivered again."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support.java_clients import run_java, start_java
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 400


def test_kill_9_mid_work_loses_nothing_and_redelivers_nothing_accepted(tmp_path) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        run = run_java("KafkaProduce", bootstrap=server.bootstrap, topic="share-crash",
                       count=COUNT)
        assert run.one("done")["count"] == COUNT
        consumer = start_java(
            "KafkaShareConsume", bootstrap=server.bootstrap, topic="share-crash",
            group="share-crash-g", count=COUNT, timeout_ms=240_000,
            group_configs="share.auto.offset.reset=earliest;share.record.lock.duration.ms=5000",
            kafka={"max.poll.records": "20"})
        events: list[dict] = []
        assert consumer.stdout is not None
        stdout = consumer.stdout

        def read() -> None:
            for line in stdout:
                if line.startswith("{"):
                    events.append(json.loads(line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        for kills in range(2):
            deadline = time.monotonic() + 120
            target = (kills + 1) * COUNT // 3
            while time.monotonic() < deadline:
                if sum(1 for e in events if e.get("event") == "commit") * 20 >= target:
                    break
                time.sleep(0.05)
            server.kill()
            time.sleep(1.0)
            server.start()
        consumer.wait(timeout=300)
        reader.join(timeout=10)
        stdout.close()
        assert consumer.stderr is not None
        errors = consumer.stderr.read()
        consumer.stderr.close()
        assert consumer.returncode == 0, errors[-4000:]
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()

    confirmed: set[int] = set()
    pending: list[int] = []
    redelivered_after_confirm = []
    accepted_ever: set[int] = set()
    for e in events:
        if e.get("event") == "record":
            if e["offset"] in confirmed:
                redelivered_after_confirm.append(e)
            if e["action"] == "accept":
                pending.append(e["offset"])
                accepted_ever.add(e["offset"])
        elif e.get("event") == "commit":
            if not e["errors"]:
                confirmed.update(pending)
            pending = []
    assert redelivered_after_confirm == [], "a confirmed acceptance was delivered again"
    assert accepted_ever == set(range(COUNT)), "every record was accepted (none lost)"
    assert [e["accepted"] for e in events if e.get("event") == "done"] == [COUNT]
