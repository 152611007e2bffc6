"""A topic written over RocketMQ, read by the Spark batch reader from the bookies.

Messages go through the official RocketMQ C++ client (rocketmq-client-python) to the RocketMQ
listeners of the session's real `ledgerwire standalone`; the rows must show the stored form the
RocketMQ side documents (protocols/rocketmq/message_encoding.py): value = body, key = the KEYS
property, headers = the properties in order (TAGS, KEYS, UNIQ_KEY, user properties) plus the
binary `__rmq` header, timestamps CreateTime = the born time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from spark_bridge_support import create_topic
from support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "rocketmq-sent"
SENT = [  # body, tags, keys, user properties
    (b"order-created-1", "Created", "order-1", {"region": "eu", "priority": "high"}),
    (b"order-paid-1", "Paid", "order-1", {"region": "eu"}),
    (b"order-created-2", "Created", "order-2 order-2b", {"trace": "t-2"}),
    (b"no-keys", "Other", None, {}),
]


def send_with_cpp_client(name_server: str) -> list[str]:
    from rocketmq.client import SendStatus

    from tests.rocketmq.cpp_client import message, patiently, producer

    p = producer(name_server, "PG_SPARK_BRIDGE")
    try:
        ids = []
        for body, tags, keys, props in SENT:
            m = message(TOPIC, body, tags, keys, props)
            result = patiently(lambda m=m: p.send_sync(m))
            assert result.status == SendStatus.OK, result
            ids.append(result.msg_id)
        return ids
    finally:
        p.shutdown()


def test_rocketmq_messages_read_with_keys_tags_and_properties(
    spark: Any, history_broker: Standalone, metadata_dir: str,
) -> None:
    create_topic(history_broker, TOPIC, 1)  # one queue: the rows come back in send order
    before_ms = int(time.time() * 1000)
    msg_ids = send_with_cpp_client(f"127.0.0.1:{history_broker.name_server_port}")
    after_ms = int(time.time() * 1000)

    df = (spark.read.format("ledgerwire").option("ledgerwire.metadata", metadata_dir)
          .option("subscribe", TOPIC).option("includeHeaders", "true").load())  # fmt: skip
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, i) for i in range(len(SENT))]
    for row, (body, tags, keys, props), msg_id in zip(rows, SENT, msg_ids, strict=True):
        assert bytes(row["value"]) == body
        assert row["topic"] == TOPIC and row["timestampType"] == 0
        assert (None if row["key"] is None else bytes(row["key"]).decode()) == keys
        born_ms = int(row["timestamp"].timestamp() * 1000 + 0.5)
        assert before_ms - 1000 <= born_ms <= after_ms + 1000
        headers = [(h["key"], bytes(h["value"])) for h in row["headers"]]
        names = [name for name, _ in headers]
        assert names[-1] == "__rmq" and len(headers[-1][1]) > 0  # flags, born host, store time
        text = {name: value.decode() for name, value in headers[:-1]}
        assert len(text) == len(headers) - 1, f"a property is repeated: {names}"
        assert text["TAGS"] == tags
        assert text.get("KEYS") == keys
        assert text["UNIQ_KEY"] == msg_id
        for name, value in props.items():
            assert text[name] == value
        # WAIT (wait for store) is set by the C++ client on every message
        assert set(text) == {"TAGS", "UNIQ_KEY", "WAIT", *props} | ({"KEYS"} if keys else set())
