"""SASL re-authentication (KIP-368) with connections_max_reauth_ms on a real standalone.

The SaslAuthenticate answer carries the session lifetime; a client that logs in again in time
(by hand over the wire, and confluent-kafka on its own) keeps its connection; one that does not
is disconnected at its next request; re-authenticating as somebody else is refused.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import trio
from confluent_kafka import Producer

from tests.kafka_server.kafka_wire_client import ConnectionClosed, WireClient
from tests.support.secured_standalone import PASSWORDS, running, sasl_plain, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIFETIME_MS = 1500


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("reauth"),
                                    extra_kafka=f"connections_max_reauth_ms = {LIFETIME_MS}\n")
    with running(standalone):
        yield standalone


async def metadata(client: WireClient) -> dict:
    return await client.request(3, 12, {"topics": None})


async def test_reauthentication_in_time_keeps_the_connection(server: Standalone) -> None:
    client = await WireClient.connect(server.kafka_port)
    try:
        first = await sasl_plain(client, "admin", PASSWORDS["admin"], check=True)
        assert first["session_lifetime_ms"] == LIFETIME_MS
        for _ in range(3):  # 3 lifetimes, logging in again within each
            await trio.sleep(LIFETIME_MS / 1000 * 0.6)
            again = await sasl_plain(client, "admin", PASSWORDS["admin"], check=True)
            assert again["session_lifetime_ms"] == LIFETIME_MS
            assert (await metadata(client))["brokers"]
    finally:
        await client.aclose()


async def test_expired_session_is_closed_and_principal_cannot_change(server: Standalone) -> None:
    late = await WireClient.connect(server.kafka_port)
    try:
        await sasl_plain(late, "alice", PASSWORDS["alice"], check=True)
        assert (await metadata(late))["brokers"]
        await trio.sleep(LIFETIME_MS / 1000 + 0.3)
        with pytest.raises(ConnectionClosed):
            await metadata(late)
    finally:
        await late.aclose()
    switch = await WireClient.connect(server.kafka_port)
    try:
        await sasl_plain(switch, "alice", PASSWORDS["alice"], check=True)
        answer = await sasl_plain(switch, "admin", PASSWORDS["admin"])
        assert answer["error_code"] != 0
        assert await switch.closed_by_server(5)
    finally:
        await switch.aclose()


def logins_per_connection(server: Standalone) -> Counter[str]:
    return Counter(re.findall(r"SASL authentication succeeded client=(\S+)", server.log()))


def test_confluent_kafka_reauthenticates_on_its_own(server: Standalone) -> None:
    before = logins_per_connection(server)
    producer = Producer({"bootstrap.servers": server.bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": PASSWORDS["admin"]})
    errors: list[object] = []
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000 + 1
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("reauth-t", b"x", on_delivery=lambda err, _m: errors.append(err))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(20) == 0
    assert len(errors) == sent and not any(errors)
    logins = logins_per_connection(server) - before
    # the producer's connection logged in again on itself (the same client address), and was
    # not closed for an expired session
    assert max(logins.values()) >= 3, logins
    expired = [line for line in server.log().splitlines() if "SASL session expired" in line]
    assert len(expired) <= 1, expired  # only the test above's
