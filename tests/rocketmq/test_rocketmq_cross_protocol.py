"""One offset space for both protocols: RocketMQ-sent messages read by confluent-kafka (with
the properties as headers), and Kafka-produced messages consumed by the RocketMQ C++ client."""

from __future__ import annotations

import pytest
import trio
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition

from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.listener import serve_kafka
from tests.rocketmq.conftest import RocketMQStack
from tests.rocketmq.cpp_client import Consumer, message, producer, send_sync_patiently

pytestmark = pytest.mark.integration


async def start_kafka(stack: RocketMQStack) -> str:
    broker = KafkaBroker(stack.topics, KafkaBrokerConfig(advertised_host="127.0.0.1",
                                                         advertised_port=0))
    addr = await stack.nursery.start(serve_kafka, broker, "127.0.0.1", 0)
    return f"127.0.0.1:{addr.port}"


async def test_rocketmq_to_kafka(stack: RocketMQStack) -> None:
    bootstrap = await start_kafka(stack)
    await stack.broker.ensure_topic("xproto", 1)

    def produce() -> None:
        p = producer(stack.name_server_addr, "PG_X")
        try:
            for i in range(3):
                send_sync_patiently(p, message("xproto", f"rmq-{i}".encode(), "TagX",
                                               f"key-{i}", {"color": "blue"}))
        finally:
            p.shutdown()

    await trio.to_thread.run_sync(produce)

    def consume() -> list[tuple[bytes | None, bytes | None, dict[str, str | bytes | None]]]:
        c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                           "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition("xproto", 0, 0)])
            out: list[tuple[bytes | None, bytes | None, dict[str, str | bytes | None]]] = []
            while len(out) < 3:
                m = c.poll(10)
                assert m is not None, "no message from the Kafka side"
                assert m.error() is None, m.error()
                out.append((m.key(), m.value(), dict(m.headers() or [])))
            return out
        finally:
            c.close()

    got = await trio.to_thread.run_sync(consume)
    assert [(k, v) for k, v, _ in got] == [(f"key-{i}".encode(), f"rmq-{i}".encode())
                                           for i in range(3)]
    headers = got[0][2]
    assert headers["TAGS"] == b"TagX" and headers["KEYS"] == b"key-0"
    assert headers["color"] == b"blue" and "UNIQ_KEY" in headers


async def test_kafka_to_rocketmq(stack: RocketMQStack) -> None:
    bootstrap = await start_kafka(stack)
    await stack.broker.ensure_topic("kproto", 1)

    def produce() -> None:
        p = KafkaProducer({"bootstrap.servers": bootstrap})
        for i in range(3):
            p.produce("kproto", key=f"k{i}".encode(), value=f"kafka-{i}".encode(),
                      headers=[("TAGS", b"FromKafka"), ("trace", b"t-%d" % i)], partition=0)
        assert p.flush(60) == 0

    await trio.to_thread.run_sync(produce)

    def consume() -> list[tuple[str, bytes, str, str]]:
        c = Consumer(stack.name_server_addr, "CG_K", "kproto", "FromKafka", props=("trace",))
        try:
            assert c.wait_for(lambda got: len(got) >= 3, 30), c.received
            return sorted((r.tags, r.body, r.keys, r.props["trace"]) for r in c.received)
        finally:
            c.shutdown()

    got = await trio.to_thread.run_sync(consume)
    assert got == [("FromKafka", f"kafka-{i}".encode(), f"k{i}", f"t-{i}") for i in range(3)]
