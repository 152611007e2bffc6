"""Kafka client quotas on a real standalone: AlterClientQuotas/DescribeClientQuotas over the
wire, and a confluent-kafka producer held to a 1 MB/s producer_byte_rate quota on its client
id: 16 MB take about 16 s (the first ~10 MB may burst, as Kafka's 11-second window allows),
and librdkafka reports the throttle through throttle_cb."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENT = "throttled-producer"
QUOTA = 1_000_000.0
TOTAL = 16_000_000


def alter(entity: list[tuple[str, str | None]], key: str, value: float,
          remove: bool = False) -> dict[str, Any]:
    return {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                         "ops": [{"key": key, "value": value, "remove": remove}]}],
            "validate_only": False}


async def test_producer_byte_rate_quota_throttles_confluent_kafka(
        standalone: Standalone) -> None:
    client = await WireClient.connect(standalone.kafka_port)
    try:
        made = await client.request(49, 1, alter([("client-id", CLIENT)], "producer_byte_rate",
                                                 QUOTA))
        assert made["entries"][0]["error_code"] == 0, made
        refused = await client.request(49, 1, alter([("user", "x")], "request_percentage", 50))
        assert refused["entries"][0]["error_code"] != 0  # not enforced: not accepted either
        described = await client.request(48, 1, {"components": [
            {"entity_type": "client-id", "match_type": 0, "match": CLIENT}], "strict": True})
        assert described["entries"] == [{
            "entity": [{"entity_type": "client-id", "entity_name": CLIENT}],
            "values": [{"key": "producer_byte_rate", "value": QUOTA}]}]
    finally:
        await client.aclose()

    throttles: list[tuple[float, Any]] = []
    producer = Producer({"bootstrap.servers": standalone.bootstrap, "client.id": CLIENT,
                         "linger.ms": 5, "queue.buffering.max.kbytes": 4096,
                         "throttle_cb": lambda e: throttles.append((time.monotonic(), e))})
    payload = b"x" * 100_000
    delivered: list[float] = []  # when each message was acknowledged

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered.append(time.monotonic())

    started = time.monotonic()
    sent = 0
    while sent < TOTAL:
        try:
            producer.produce("quota-t", payload, on_delivery=on_delivery)
            sent += len(payload)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    ended = time.monotonic()
    assert len(delivered) == TOTAL // len(payload)
    assert throttles and max(e.throttle_time for _, e in throttles) > 0
    # once throttled, the producer runs at the quota
    first = throttles[0][0]
    steady = sum(len(payload) for at in delivered if at > first) / (ended - first)
    overall = TOTAL / (ended - started)
    print(f"16 MB at a 1 MB/s quota: {ended - started:.1f} s, {overall / 1e6:.2f} MB/s "
          f"overall, {steady / 1e6:.2f} MB/s once throttled, {len(throttles)} throttle reports")
    assert 0.5 * QUOTA < steady < 1.3 * QUOTA
    # Kafka's 11-second window lets one first burst through, never more
    assert overall < 1.7 * QUOTA and TOTAL <= 1.1 * QUOTA * (ended - started + 11)
