"""Real RocketMQ clients against a `ledgerwire standalone` with [rocketmq.acl] on: the official
C++ client (rocketmq-client-python, set_session_credentials) and ali-ons (accessKeyId /
accessKeySecret) sign their requests; the right keys send and consume, a wrong secret and a
DENY topic are refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from rocketmq.client import ConsumeStatus, Producer, PushConsumer, RecvMessage, SendStatus

from tests.rocketmq.cpp_client import message, refused_patiently, send_sync_patiently
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AK, SK = "RocketMQ", "12345678"
HERE = Path(__file__).parent
NODE_PATH = os.environ.get("LEDGERWIRE_ALI_ONS_NODE_PATH",
                           str(HERE.parent / "node" / "node_modules"))
ACL_TOML = f"""
[rocketmq.acl]
enabled = true

[[rocketmq.acl.accounts]]
access_key = "{AK}"
secret_key = "{SK}"
default_topic_perm = "PUB|SUB"
default_group_perm = "SUB"
topic_perms = ["acl_denied=DENY"]

[[rocketmq.acl.accounts]]
access_key = "OnsKey12"
secret_key = "OnsSecret"
default_topic_perm = "PUB|SUB"
default_group_perm = "SUB"
"""

# ali-ons producer + consumer with the keys from the environment; prints one JSON line
ALI_ONS_JS = r"""
'use strict'
const { Producer, Consumer, Message } = require('ali-ons')
const silent = { info () {}, warn () {}, debug () {}, error (...a) { console.error(...a) } }
async function main () {
  const [nameSrv, topic, group] = process.argv.slice(2)
  const common = { nameSrv, httpclient: {}, accessKeyId: process.env.ONS_AK,
                   accessKeySecret: process.env.ONS_SK, logger: silent }
  // sendMsgTimeout: its 3 s default (all retries within 4 s) is tight on a loaded machine
  const producer = new Producer({ ...common, producerGroup: 'PG_' + group,
                                  sendMsgTimeout: 15000 })
  await producer.ready()
  const sent = []
  for (let i = 0; i < 3; i++) {
    const result = await producer.send(new Message(topic, 'TagA', 'ons-acl-' + i))
    sent.push(result.sendStatus)
  }
  await producer.close()
  const consumer = new Consumer({ ...common, consumerGroup: group,
                                  consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' })
  const received = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out: ' + received)), 30000)
    consumer.subscribe(topic, '*', async msg => {
      received.push(msg.body.toString())
      if (received.length >= 3) { clearTimeout(timer); setTimeout(resolve, 500) }
    })
    consumer.on('error', reject)
  })
  await consumer.close()
  console.log(JSON.stringify({ sent, received }))
  process.exit(0)
}
main().catch(err => { console.error(String(err && err.message || err)); process.exit(1) })
"""


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    base = tmp_path_factory.mktemp("acl")
    config = base / "acl.toml"
    config.write_text(ACL_TOML)
    server = Standalone(base / "data", extra_args=["--config", str(config)])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _ns(server: Standalone) -> str:
    return f"127.0.0.1:{server.name_server_port}"


def _producer(server: Standalone, group: str, secret: str) -> Producer:
    p = Producer(group, timeout=10_000)
    p.set_namesrv_addr(_ns(server))
    p.set_session_credentials(AK, secret, "ALIYUN")
    p.start()
    return p


def test_cpp_client_with_the_right_keys_sends_and_consumes(acl_server: Standalone) -> None:
    p = _producer(acl_server, "PG_ACL", SK)
    try:
        statuses = [send_sync_patiently(p, message("acl_cpp", f"m{i}".encode(), "TagA"))
                    for i in range(5)]
    finally:
        p.shutdown()
    assert statuses == [SendStatus.OK] * 5

    received: list[bytes] = []
    lock = threading.Lock()

    def on_message(m: RecvMessage) -> ConsumeStatus:
        with lock:
            received.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer("CG_ACL")
    c.set_namesrv_addr(_ns(acl_server))
    c.set_session_credentials(AK, SK, "ALIYUN")
    c.subscribe("acl_cpp", on_message, "*")
    c.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(set(received)) < 5:
            time.sleep(0.05)
    finally:
        c.shutdown()
    assert set(received) == {f"m{i}".encode() for i in range(5)}


def test_cpp_client_with_a_wrong_secret_is_refused(acl_server: Standalone) -> None:
    # the C++ client reports every failed send as "No route info"; the broker's log says why
    refusal = "Check signature failed for accessKey=RocketMQ"
    p = _producer(acl_server, "PG_ACL_BAD", "wrong-secret")
    try:
        refused_patiently(lambda: p.send_sync(message("acl_cpp_bad", b"nope")), "acl_cpp_bad",
                          lambda: refusal in acl_server.log())
    finally:
        p.shutdown()
    log = acl_server.log()
    assert "request refused by the ACL" in log
    assert refusal in log


def test_cpp_client_send_to_a_denied_topic_is_refused(acl_server: Standalone) -> None:
    # no send may ever succeed, and the broker's refusal must be the ACL's
    refusal = "No default permission for topic=acl_denied"
    p = _producer(acl_server, "PG_ACL_DENY", SK)
    try:
        refused_patiently(lambda: p.send_sync(message("acl_denied", b"nope")), "acl_denied",
                          lambda: refusal in acl_server.log())
    finally:
        p.shutdown()
    assert refusal in acl_server.log()


@pytest.mark.skipif(shutil.which("node") is None or not (Path(NODE_PATH) / "ali-ons").is_dir(),
                    reason=f"ali-ons is not installed in {NODE_PATH}")
@pytest.mark.parametrize(("secret", "works"), [("OnsSecret", True), ("wrong-secret", False)])
def test_ali_ons_signs_with_its_access_keys(acl_server: Standalone, tmp_path: Path,
                                            secret: str, works: bool) -> None:
    script = tmp_path / "ali_ons_acl.js"
    script.write_text(ALI_ONS_JS)
    topic = "acl_ons" if works else "acl_ons_bad"
    # ali-ons does not fall back to TBW102: the topic must exist (made here over Kafka)
    admin = AdminClient({"bootstrap.servers": acl_server.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2)]).values():
        future.result(timeout=30)
    result = subprocess.run(
        ["node", str(script), _ns(acl_server), topic, "CG_ONS_" + topic],
        capture_output=True, timeout=90, check=False,
        env={**os.environ, "NODE_PATH": NODE_PATH, "ONS_AK": "OnsKey12", "ONS_SK": secret})
    if not works:
        assert result.returncode != 0
        assert b"still failed" in result.stderr, result.stderr.decode()[-2000:]
        assert "Check signature failed for accessKey=OnsKey12" in acl_server.log()
        return
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert out["sent"] == ["SEND_OK"] * 3
    assert sorted(out["received"]) == ["ons-acl-0", "ons-acl-1", "ons-acl-2"]
