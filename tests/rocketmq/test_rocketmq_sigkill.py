"""Offsets, pending delays and half messages survive SIGKILL + restart on the durable backend
(embedded metadata store and a real bookie with fsync, in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext
from tests.support.standalone import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER = Path(__file__).parent / "durable_server.py"
LEVELS = "1s 4s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


async def start(data_dir: Path, bookie_port: int) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(  # noqa: ASYNC220 - a long-lived server, read from a thread
        [sys.executable, str(SERVER), str(data_dir), str(bookie_port), LEVELS],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with trio.fail_after(60):
        line = await trio.to_thread.run_sync(proc.stdout.readline)
    assert line.startswith("READY"), line
    _, ns, broker = line.split()
    return proc, ns, broker


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


async def test_state_survives_sigkill(tmp_path: Path) -> None:
    bookie_port = free_port()
    proc, _, broker = await start(tmp_path / "data", bookie_port)
    try:
        c = await RawClient.connect(broker)
        for i in range(3):
            r = await c.call(RC.SEND_MESSAGE_V2, send_ext("killed", {"TAGS": "x"}), b"m%d" % i)
            assert r.code == ResponseCode.SUCCESS, r.remark
        r = await c.call(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "killed",
                                                     "queueId": 0, "commitOffset": 2})
        assert r.code == ResponseCode.SUCCESS
        delayed_sent = time.time()
        r = await c.call(RC.SEND_MESSAGE_V2, send_ext("killed", {"DELAY": "2"}), b"delayed")
        assert r.code == ResponseCode.SUCCESS
        half = send_ext("killed", {"UNIQ_KEY": "HK"})
        half["f"] = 4
        r = await c.call(RC.SEND_MESSAGE_V2, half, b"half")
        assert r.code == ResponseCode.SUCCESS
        _, _, half_offset = decode_offset_message_id(r.ext_fields["msgId"])
        await c.aclose()
    finally:
        stop(proc)  # SIGKILL: nothing is flushed or closed

    proc, _, broker = await start(tmp_path / "data", bookie_port)
    try:
        c = await RawClient.connect(broker)
        r = await c.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "killed",
                                                    "queueId": 0})
        assert r.ext_fields["offset"] == "2"
        r = await c.call(RC.PULL_MESSAGE, pull_ext("killed", 0, 3, suspend_ms=15_000),
                         wait_s=20)
        assert r.code == ResponseCode.SUCCESS, r.remark
        [delayed] = decode_stored_messages(r.body)
        assert delayed.body == b"delayed"
        assert time.time() - delayed_sent >= 4.0 - 0.05
        r = await c.call(RC.PULL_MESSAGE, pull_ext("killed", 0, 4))
        assert r.code == ResponseCode.PULL_NOT_FOUND  # the half message is still invisible
        r = await c.call(RC.END_TRANSACTION, {"producerGroup": "pg", "commitLogOffset": half_offset,
                                              "commitOrRollback": 8})
        assert r.code == ResponseCode.SUCCESS
        r = await c.call(RC.PULL_MESSAGE, pull_ext("killed", 0, 4, suspend_ms=5000))
        assert [m.body for m in decode_stored_messages(r.body)] == [b"half"]
        await c.aclose()
    finally:
        stop(proc)
