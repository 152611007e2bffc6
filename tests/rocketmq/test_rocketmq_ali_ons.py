"""ali-ons 3.12 (Node.js) producer and push consumer with tags against the in-process broker.

ali-ons is found through NODE_PATH: tests/node/node_modules (once the lead adds it to
tests/node/package.json), or LEDGERWIRE_ALI_ONS_NODE_PATH."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import trio

from tests.rocketmq.conftest import RocketMQStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).parent
NODE_PATH = os.environ.get("LEDGERWIRE_ALI_ONS_NODE_PATH",
                           str(HERE.parent / "node" / "node_modules"))


def _ali_ons_available() -> bool:
    return shutil.which("node") is not None and (Path(NODE_PATH) / "ali-ons").is_dir()


@pytest.mark.skipif(not _ali_ons_available(), reason=f"ali-ons is not installed in {NODE_PATH}")
async def test_ali_ons_producer_and_tag_consumer(stack: RocketMQStack) -> None:
    await stack.broker.ensure_topic("ons_topic", 2)
    result = await trio.run_process(
        ["node", str(HERE / "ali_ons_client.js"), stack.name_server_addr, "ons_topic", "CG_ONS"],
        capture_stdout=True, capture_stderr=True, check=False,
        env={**os.environ, "NODE_PATH": NODE_PATH})
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert [s["status"] for s in out["sent"]] == ["SEND_OK"] * 5
    got = sorted((r["tag"], r["body"], r["keys"]) for r in out["received"])
    assert got == [("TagA", "ons-0", "key-0"), ("TagA", "ons-2", "key-2"),
                   ("TagA", "ons-4", "key-4")]


