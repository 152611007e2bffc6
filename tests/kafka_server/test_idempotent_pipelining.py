"""Pipelined idempotent produce on one connection: batches are judged in the order they came.

The Java producer keeps up to 5 batches per partition in flight on one connection. The
listener serves a connection's requests concurrently, and the Produce turns
(protocols/kafka/handlers/request_order.py) make every partition judge them in the order they
were read, so no batch ever finds itself ahead of its producer's sequence, and the partition
log's wait for earlier batches (PartitionLog._wait_for_earlier_batches) is never needed.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.topics.partition_log import PartitionLog
from protocols.kafka.record_batch import build_batch, iter_batches
from tests.kafka_server.conftest import KafkaStack
from tests.kafka_server.test_kafka_handlers_wire import (
    FETCH,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    create_topic,
    fetch_body,
)

PARTITIONS = 3
REQUESTS = 30
RECORDS = 3


def _produce_body(topic: str, batches: dict[int, bytes]) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": index, "records": records} for index, records in batches.items()]}]}


async def test_pipelined_idempotent_batches_are_judged_in_arrival_order(
        stack: KafkaStack, monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[int] = []

    async def never_wait(self: PartitionLog, header: Any) -> None:
        waited.append(header.base_sequence)

    # A batch found ahead of its sequence would be judged (and refused) at once.
    monkeypatch.setattr(PartitionLog, "_wait_for_earlier_batches", never_wait)
    async with await stack.client() as client:
        await create_topic(client, "pipelined", PARTITIONS)
        ids = await client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        pid, epoch = ids["producer_id"], ids["producer_epoch"]
        next_sequence = [0] * PARTITIONS
        sent: list[str] = []
        for i in range(REQUESTS):
            # Every third request carries all partitions (their first one opens the logs,
            # a checkpoint the single-partition requests behind it could overtake).
            indexes = range(PARTITIONS) if i % 3 == 0 else [i % PARTITIONS]
            batches = {}
            for index in indexes:
                batches[index] = build_batch(
                    [(f"k{i}".encode(), f"v{i}-{index}".encode())] * RECORDS,
                    producer_id=pid, producer_epoch=epoch, base_sequence=next_sequence[index])
                next_sequence[index] += RECORDS
            await client.send(PRODUCE, 9, _produce_body("pipelined", batches))
            sent.append("produce")
            if i % 7 == 3:  # a request of another kind in between holds the next ones back
                await client.send(METADATA, 9, {"topics": [{"name": "pipelined"}],
                                                "allow_auto_topic_creation": False})
                sent.append("metadata")
        errors = []
        for kind in sent:
            _, answer = await client.receive(timeout_s=30)
            if kind == "produce":
                errors += [p["error_code"] for t in answer["responses"]
                           for p in t["partition_responses"] if p["error_code"]]
        assert errors == [] and waited == []
        for index in range(PARTITIONS):
            answer = await client.request(FETCH, 11, fetch_body("pipelined", 0, partition=index))
            stored = answer["responses"][0]["partitions"][0]["records"]
            sequences = [header.base_sequence for header, _ in iter_batches(stored)]
            assert sequences == list(range(0, next_sequence[index], RECORDS))
