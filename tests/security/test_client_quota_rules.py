"""Client quota rules without a server (protocols/kafka/client_quotas.py): Kafka's entity
precedence, DescribeClientQuotas matching, refused keys and the meter's throttle time."""

from __future__ import annotations

import pytest

from protocols.kafka.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    QuotaError,
    RateMeter,
    check_key,
    entity_of,
    matches,
    resolve,
)


def test_the_most_specific_entity_that_sets_the_key_wins() -> None:
    table = {
        entity_of([("client-id", None)]): {PRODUCER_BYTE_RATE: 1.0},
        entity_of([("user", None)]): {PRODUCER_BYTE_RATE: 2.0},
        entity_of([("user", "alice")]): {PRODUCER_BYTE_RATE: 3.0},
        entity_of([("client-id", "app"), ("user", "alice")]): {"consumer_byte_rate": 9.0},
    }
    assert resolve(table, "alice", "app", PRODUCER_BYTE_RATE) == (
        (("user", "alice"),), 3.0)
    assert resolve(table, "bob", "app", PRODUCER_BYTE_RATE)[1] == 2.0  # type: ignore[index]
    del table[entity_of([("user", None)])]
    assert resolve(table, "bob", "app", PRODUCER_BYTE_RATE)[1] == 1.0  # type: ignore[index]
    assert resolve({}, "bob", "app", PRODUCER_BYTE_RATE) is None


def test_describe_filters_and_refused_entities_and_keys() -> None:
    alice_app = entity_of([("user", "alice"), ("client-id", "app")])
    assert matches(alice_app, [("user", MATCH_EXACT, "alice")], strict=False)
    assert not matches(alice_app, [("user", MATCH_EXACT, "alice")], strict=True)
    assert matches(alice_app, [("user", MATCH_SPECIFIED, None),
                               ("client-id", MATCH_EXACT, "app")], strict=True)
    assert not matches(alice_app, [("user", MATCH_DEFAULT, None)], strict=False)
    with pytest.raises(QuotaError):
        entity_of([("ip", "1.2.3.4")])
    with pytest.raises(QuotaError, match="not enforced"):
        check_key("request_percentage", 50.0)
    with pytest.raises(QuotaError, match="positive"):
        check_key(PRODUCER_BYTE_RATE, 0.0)


def test_meter_throttles_back_to_the_quota() -> None:
    meter = RateMeter()
    for second in range(20):  # 2 MB/s against a 1 MB/s quota
        meter.record(2e6, float(second))
    rate = meter.rate(20.0)
    assert 1.9e6 < rate < 2.3e6
    throttle = meter.throttle_s(1e6, 20.0)
    assert 10.0 <= throttle <= 11.0  # the time that brings the window's average to 1 MB/s
    quiet = RateMeter()
    quiet.record(5e6, 0.0)  # a first burst within (samples - 1) seconds of quota: no throttle
    assert quiet.throttle_s(1e6, 0.5) == 0.0
