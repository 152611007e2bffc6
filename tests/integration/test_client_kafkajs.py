"""kafkajs (Node; ApiVersions v2->v1->v0, Produce v7, Fetch v11) against `ledgerwire standalone`.

What kafkajs writes is read back twice: by librdkafka with partition assignment, and by a
kafkajs consumer group (JoinGroup/SyncGroup/Heartbeat/OffsetCommit on the broker's coordinator).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.messages import CODECS, make_messages
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
COUNT = 20_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_produce_every_codec(
    module_standalone: Standalone, codec: str, tmp_path: Path
) -> None:
    assert (NODE_DIR / "node_modules" / "kafkajs").is_dir(), "run scripts/run-tests (npm install)"
    topic = f"js-{codec}"
    messages = make_messages(COUNT, seed=300 + CODECS.index(codec))
    input_path = tmp_path / "input.json"
    input_path.write_text(
        json.dumps(
            [
                {
                    "key": b64(m.key),
                    "value": b64(m.value),
                    "headers": {name: b64(value) for name, value in m.headers},
                    "timestamp": m.timestamp_ms,
                }
                for m in messages
            ]
        )
    )
    done = subprocess.run(
        ["node", "produce.js", module_standalone.bootstrap, topic, codec, str(input_path)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    base_offsets = json.loads(done.stdout.strip().splitlines()[-1])["baseOffsets"]
    assert base_offsets == list(range(0, COUNT, 1000))

    consumer = Consumer(
        {
            "bootstrap.servers": module_standalone.bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[object] = []
    idle = 0
    while len(got) < COUNT and idle < 40:
        batch = consumer.consume(num_messages=5000, timeout=0.5)
        idle = 0 if batch else idle + 1
        got.extend(batch)
    consumer.close()
    assert len(got) == COUNT
    for msg, expected in zip(got, messages, strict=True):
        assert msg.error() is None  # type: ignore[attr-defined]
        assert msg.offset() == expected.index  # type: ignore[attr-defined]
        assert msg.key() == expected.key  # type: ignore[attr-defined]
        assert msg.value() == expected.value  # type: ignore[attr-defined]
        assert tuple(msg.headers() or ()) == expected.headers  # type: ignore[attr-defined]
        assert msg.timestamp()[1] == expected.timestamp_ms  # type: ignore[attr-defined]


def run_node(*args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        ["node", *args], cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_kafkajs_consumer_group_reads_everything(
    module_standalone: Standalone, tmp_path: Path
) -> None:
    topic, count = "js-group", 5000
    messages = make_messages(count, seed=399)
    input_path = tmp_path / "input.json"
    input_path.write_text(
        json.dumps(
            [
                {
                    "key": b64(m.key),
                    "value": b64(m.value),
                    "headers": {name: b64(value) for name, value in m.headers},
                    "timestamp": m.timestamp_ms,
                }
                for m in messages
            ]
        )
    )
    run_node("produce.js", module_standalone.bootstrap, topic, "gzip", str(input_path))
    out = run_node("consume.js", module_standalone.bootstrap, topic, "js-group-1", str(count))
    got = [json.loads(line) for line in out.strip().splitlines()]
    assert [g["offset"] for g in got] == list(range(count))
    for g, m in zip(got, messages, strict=True):
        assert base64.b64decode(g["key"]) == m.key
        assert base64.b64decode(g["value"]) == m.value
        assert {k: base64.b64decode(v) for k, v in g["headers"].items()} == dict(m.headers)
        assert g["timestamp"] == m.timestamp_ms
