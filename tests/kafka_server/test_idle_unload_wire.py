"""An idle partition unloaded between a real client's requests: the client sees nothing
(gateway/topics/idle_unloader.py).  confluent-kafka's idempotent producer writes, the partition
is closed as idle, the same producer writes on (its sequence continues on the reopened log)
and a consumer reads every record back in order."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from gateway.topics.idle_unloader import IdleUnloader
from tests.kafka_server.conftest import running_stack

pytestmark = pytest.mark.integration

TOPIC = "sleepy"
CLIENT_TIMEOUT_S = 60.0


def produce(producer: Any, first: int, count: int, errors: list[str]) -> None:
    failed: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for i in range(first, first + count):
        producer.produce(TOPIC, f"value-{i}".encode(), partition=0, on_delivery=report)
    if producer.flush(CLIENT_TIMEOUT_S) or failed:
        errors.append(f"produce {first}: {failed[:3]}")


def consume(bootstrap: str, count: int) -> list[tuple[int | None, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-unload",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[tuple[int | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        for _ in range(200):
            if len(got) >= count:
                break
            for message in consumer.consume(count - len(got), timeout=1.0):
                if message.error() is not None:
                    raise AssertionError(f"consumer error: {message.error()}")
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


async def test_a_client_writes_and_reads_across_an_idle_unload() -> None:
    from confluent_kafka import Producer

    async with running_stack() as stack:
        topics = stack.topics
        topics.unloader = IdleUnloader(topics, idle_s=0.4, max_open=0)
        await topics.create_topic(TOPIC, 1)
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5,
                             "error_cb": lambda err: errors.append(str(err))})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(topics.run_unloader)
            with trio.fail_after(CLIENT_TIMEOUT_S * 2):
                await trio.to_thread.run_sync(produce, producer, 0, 50, errors)
                first_log = topics.open_partitions()[(TOPIC, 0)]
                while not first_log.closed:  # noqa: ASYNC110 (unloaded 0.4-0.5 s after use)
                    await trio.sleep(0.05)
                assert (TOPIC, 0) not in topics.open_partitions()
                await trio.to_thread.run_sync(produce, producer, 50, 50, errors)
                # reopened (and maybe unloaded again already: 0.4 s on a loaded machine)
                assert topics.open_partitions().get((TOPIC, 0)) is not first_log
                got = await trio.to_thread.run_sync(consume, stack.bootstrap, 100)
            nursery.cancel_scope.cancel()
        await trio.to_thread.run_sync(producer.flush, 10)
        seen_errors = list(errors)  # (not what the client says once the server has stopped)
    assert not seen_errors
    assert got == [(i, f"value-{i}".encode()) for i in range(100)]
    assert topics.unloader.unloaded >= 1
