"""RocketMQ 5's Node.js client (npm rocketmq-client-nodejs 1.0.8) against a real standalone:
a producer and a SimpleConsumer over the gRPC endpoint, and the Python 5.x client reading what
the Node.js producer wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.rocketmq5.support import received, run5
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def test_node_producer_and_simple_consumer(module_standalone: Standalone) -> None:
    ep = f"127.0.0.1:{module_standalone.rocketmq_grpc_port}"
    done = subprocess.run(["node", "rocketmq5.js", ep, "r5-node", "node-group", "4"],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    sent = {x["messageId"] for x in lines if "sent" in x}
    got = [x for x in lines if "body" in x]
    assert sorted(x["body"] for x in got) == [f"node-{i}" for i in range(4)]
    assert {x["messageId"] for x in got} == sent and {x["tag"] for x in got} == {"node"}
    # The Python client of another group reads the same messages: one topic space.
    other = received(run5("receive", ep, "r5-node", "--consumer-group", "py-group",
                          "--expect", "4"))
    assert sorted(m["body"] for m in other) == [f"node-{i}" for i in range(4)]
    assert {tuple(m["keys"]) for m in other} == {(f"nk-{i}",) for i in range(4)}
