"""An idempotent producer's batches around a retriable refusal are stored once (librdkafka).

What a partition hand-off looks like to a pipelining client: the old owner stores a batch but
answers it with a retriable error (its ownership ended while the append was in flight), the
new owner refuses the next batch before storing it (not ready yet), and the batches behind
those are already on their way.  librdkafka retries the first two with the same sequences once
its in-flight requests are answered; a batch answered OUT_OF_ORDER_SEQUENCE_NUMBER meanwhile
makes it bump the producer epoch and send everything unacknowledged again under new sequence
numbers ("skipped sequence numbers"), so the batch that was stored is stored twice (13
duplicates in a session-6 chaos trial, read back from the bookies: the same values at epoch 0
and epoch 1).  A batch ahead of its producer's sequence must therefore be refused with a
retriable code, never OUT_OF_ORDER, while earlier batches may still come
(gateway/topics/partition_log.py).

The refusals are injected into the partition log of a real in-process stack; the client is
confluent-kafka in a worker thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
import trio

from gateway.topics.partition_log import PartitionLog
from protocols.kafka.errors import NotLeaderOrFollowerError
from protocols.kafka.record_batch import decode_records, iter_batches
from tests.kafka_server.conftest import KafkaStack

pytestmark = pytest.mark.integration

TOPIC = "retry-gap"
FAULT_AT_BATCH = 30  # of partition 0: stored, then answered NOT_LEADER; the next one refused
MESSAGES = 500


def produce(bootstrap: str, stop: threading.Event, acked: list[str], errors: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0, "retry.backoff.ms": 20,
                         "message.timeout.ms": 60000, "request.timeout.ms": 30000})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value().decode())
        else:
            errors.append(str(err))

    for n in range(MESSAGES):
        if stop.is_set():
            break
        producer.produce(TOPIC, f"m{n}".encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        time.sleep(0.004)  # one message a batch: librdkafka pipelines up to 5
    if producer.flush(60) != 0:
        errors.append("not flushed")


async def test_batches_behind_a_retriable_refusal_are_not_stored_twice(
        stack: KafkaStack, monkeypatch: pytest.MonkeyPatch) -> None:
    original = PartitionLog.append
    calls = {"n": 0}

    async def append(self: PartitionLog, records: Any, **kwargs: Any) -> Any:
        if not self.name.endswith(f"{TOPIC}-0"):
            return await original(self, records, **kwargs)
        calls["n"] += 1
        if calls["n"] == FAULT_AT_BATCH:
            await original(self, records, **kwargs)  # stored ...
            await trio.sleep(0.3)  # ... while the batches behind it arrive
            raise NotLeaderOrFollowerError("ownership ended while the append was in flight")
        if calls["n"] == FAULT_AT_BATCH + 1:
            raise NotLeaderOrFollowerError("the new owner is not ready yet")
        return await original(self, records, **kwargs)

    monkeypatch.setattr(PartitionLog, "append", append)
    await stack.topics.create_topic(TOPIC, 1)
    acked: list[str] = []
    errors: list[str] = []
    stop = threading.Event()
    try:
        with trio.fail_after(120):
            await trio.to_thread.run_sync(produce, stack.bootstrap, stop, acked, errors)
    finally:
        stop.set()
    assert calls["n"] > FAULT_AT_BATCH + 2, "the fault was never reached"
    plog = await stack.topics.partition(TOPIC, 0)
    stored: Counter[str] = Counter()
    epochs: set[int] = set()
    offset = 0
    while offset < plog.high_watermark:
        for data in await plog.read(offset, 1 << 20):
            for header, _ in iter_batches(data):
                epochs.add(header.producer_epoch)
                offset = header.base_offset + header.last_offset_delta + 1
            stored.update((r.value or b"").decode() for r in decode_records(data))
    twice = sorted(v for v, c in stored.items() if c > 1)
    assert errors == []
    assert twice == [], f"stored twice: {twice[:10]} (producer epochs {sorted(epochs)})"
    assert set(acked) <= set(stored) and len(set(acked)) == MESSAGES
