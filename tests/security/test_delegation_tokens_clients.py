"""Kafka delegation tokens (KIP-48) on a real SASL standalone with ACLs, with real clients.

One standalone with a delegation token secret key serves the module.  `alice` may WRITE the
topic `tok-ok` and nothing on `tok-denied`.  Over the wire (the project's codec, as an outside
client): the four token APIs with Kafka's error codes; a SCRAM login with the token
(tokenauth=true) is alice, may not ask for tokens, and stops working once the token is expired.
confluent-kafka (librdkafka cannot send SCRAM extensions: the token id is its user name) and
Apache's Java clients 4.3 (Admin createDelegationToken, a producer with ScramLoginModule
tokenauth="true") produce as alice with the token, are refused where alice is, and cannot log
in after the token is expired.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaError, Producer

from protocols.kafka.acl_model import OP_DESCRIBE, OP_WRITE, PAT_LITERAL, PERM_ALLOW, RES_TOPIC
from protocols.kafka.errors import ErrorCode
from protocols.kafka.sasl_client import SaslClient
from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.java_clients import run_java
from tests.support.secured_standalone import (
    PASSWORDS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    login,
    running,
    secured_standalone,
)
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration]

SECRET_KEY = "token-secret-key-for-tests-0123456789"
OK_TOPIC, DENIED_TOPIC = "tok-ok", "tok-denied"
CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    directory = tmp_path_factory.mktemp("tokens")
    standalone = secured_standalone(
        directory, extra=f'delegation_token_secret_key = "{SECRET_KEY}"\n'
                         'delegation_token_max_lifetime_ms = 3600000')
    with running(standalone):
        trio.run(_prepare, standalone.kafka_port)
        yield standalone


async def _prepare(port: int) -> None:
    admin = await login(port, "admin")
    try:
        made = await admin.request(19, 5, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1}
            for name in (OK_TOPIC, DENIED_TOPIC)]})
        assert all(t["error_code"] == 0 for t in made["topics"]), made
        acls = await admin.request(30, 3, {"creations": [
            {"resource_type": RES_TOPIC, "resource_name": OK_TOPIC,
             "resource_pattern_type": PAT_LITERAL, "principal": "User:alice", "host": "*",
             "operation": op, "permission_type": PERM_ALLOW} for op in (OP_WRITE, OP_DESCRIBE)]})
        assert all(r["error_code"] == 0 for r in acls["results"]), acls
    finally:
        await admin.aclose()


async def create_token(port: int, user: str, version: int = 3, **body: Any) -> dict[str, Any]:
    client = await login(port, user)
    try:
        return await client.request(CREATE, version, {
            "owner_principal_type": None, "owner_principal_name": None, "renewers": [],
            "max_lifetime_ms": -1, **body})
    finally:
        await client.aclose()


def password_of(created: dict[str, Any]) -> str:
    return base64.b64encode(created["hmac"]).decode("ascii")


async def token_login(port: int, token_id: str, password: str, *,
                      tokenauth: bool = True) -> tuple[WireClient, dict[str, Any]]:
    """A SCRAM-SHA-512 login with the token; the client and the last SaslAuthenticate answer."""
    client = await WireClient.connect(port)
    scram = SaslClient("SCRAM-SHA-512", token_id, password,
                       extensions={"tokenauth": "true"} if tokenauth else None)
    shake = await client.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    assert shake["error_code"] == 0, shake
    first = await client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first_token()})
    if first["error_code"]:
        return client, first
    final = await client.request(SASL_AUTHENTICATE, 2,
                                 {"auth_bytes": scram.next_token(first["auth_bytes"])})
    if not final["error_code"]:
        scram.finish(final["auth_bytes"])
    return client, final


async def produce_one(client: WireClient, topic: str) -> int:
    from protocols.kafka.record_batch import build_batch
    answer = await client.request(0, 9, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


async def test_token_apis_and_login_over_the_wire(server: Standalone) -> None:
    port = server.kafka_port
    created = await create_token(port, "alice", renewers=[
        {"principal_type": "User", "principal_name": "mallory"}])
    assert created["error_code"] == 0, created
    assert (created["principal_type"], created["principal_name"]) == ("User", "alice")
    assert created["token_requester_principal_name"] == "alice"
    assert len(created["hmac"]) == 64 and len(created["token_id"]) == 22
    assert created["issue_timestamp_ms"] < created["expiry_timestamp_ms"] \
        <= created["max_timestamp_ms"] <= created["issue_timestamp_ms"] + 3600000
    token_id, password = created["token_id"], password_of(created)

    # A token for someone else needs CREATE_TOKENS on that user.
    other = await create_token(port, "alice", owner_principal_type="User",
                               owner_principal_name="admin")
    assert other["error_code"] == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, other
    for_alice = await create_token(port, "admin", owner_principal_type="User",
                                   owner_principal_name="alice", max_lifetime_ms=600000)
    assert for_alice["error_code"] == 0 and for_alice["principal_name"] == "alice", for_alice
    assert for_alice["token_requester_principal_name"] == "admin"
    assert for_alice["max_timestamp_ms"] - for_alice["issue_timestamp_ms"] == 600000

    # The token logs in as alice: her ACLs apply, and it may not ask for tokens.
    client, answer = await token_login(port, token_id, password)
    try:
        assert answer["error_code"] == 0, answer
        assert await produce_one(client, OK_TOPIC) == 0
        assert await produce_one(client, DENIED_TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for api, version, body in ((CREATE, 2, {"renewers": [], "max_lifetime_ms": -1}),
                                   (RENEW, 2, {"hmac": created["hmac"], "renew_period_ms": -1}),
                                   (DESCRIBE, 3, {"owners": None})):
            refused = await client.request(api, version, body)
            assert refused["error_code"] == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, api
    finally:
        await client.aclose()
    wrong, refused_login = await token_login(port, token_id, base64.b64encode(b"x" * 64).decode())
    await wrong.aclose()
    assert refused_login["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    unknown, no_token = await token_login(port, "nosuchtoken0000000000A", password)
    await unknown.aclose()
    assert no_token["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED

    alice, mallory, admin = [await login(port, u) for u in ("alice", "mallory", "admin")]
    try:
        listed = await alice.request(DESCRIBE, 3, {"owners": None})
        assert {t["token_id"] for t in listed["tokens"]} == {token_id, for_alice["token_id"]}
        mine = next(t for t in listed["tokens"] if t["token_id"] == token_id)
        assert mine["hmac"] == created["hmac"] and mine["renewers"] == [
            {"principal_type": "User", "principal_name": "mallory"}]
        # mallory renews (a renewer) and sees it; admin (super user) sees both; an empty
        # owner list is no tokens, an owner filter only that owner's
        renewed = await mallory.request(RENEW, 2, {"hmac": created["hmac"],
                                                   "renew_period_ms": 120000})
        assert renewed["error_code"] == 0 and renewed["expiry_timestamp_ms"] > 0, renewed
        seen = await mallory.request(DESCRIBE, 3, {"owners": None})
        assert [t["token_id"] for t in seen["tokens"]] == [token_id]
        assert (await admin.request(DESCRIBE, 3, {"owners": []}))["tokens"] == []
        by_owner = await admin.request(DESCRIBE, 3, {"owners": [
            {"principal_type": "User", "principal_name": "alice"}]})
        assert len(by_owner["tokens"]) == 2
        forged = await mallory.request(EXPIRE, 2, {"hmac": b"\0" * 64,
                                                   "expiry_time_period_ms": -1})
        assert forged["error_code"] == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        not_renewer = await mallory.request(RENEW, 2, {"hmac": for_alice["hmac"],
                                                       "renew_period_ms": 1000})
        assert not_renewer["error_code"] == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH

        # Expired (period 0: expiry is now): the login is refused, the token purged.
        expired = await alice.request(EXPIRE, 2, {"hmac": created["hmac"],
                                                  "expiry_time_period_ms": 0})
        assert expired["error_code"] == 0, expired
        late, after = await token_login(port, token_id, password)
        await late.aclose()
        assert after["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        gone = await admin.request(DESCRIBE, 3, {"owners": None})
        assert token_id not in {t["token_id"] for t in gone["tokens"]}
        again = await alice.request(RENEW, 2, {"hmac": created["hmac"], "renew_period_ms": -1})
        assert again["error_code"] == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        dropped = await admin.request(EXPIRE, 2, {"hmac": for_alice["hmac"],
                                                  "expiry_time_period_ms": -1})
        assert dropped["error_code"] == 0, dropped
    finally:
        for client in (alice, mallory, admin):
            await client.aclose()


def _producer(server: Standalone, user: str, password: str,
              errors: list[KafkaError] | None = None) -> Producer:
    return Producer({"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                     "sasl.password": password, "message.timeout.ms": 20000, "log_level": 0,
                     "error_cb": (errors if errors is not None else []).append})


def _deliver(producer: Producer, topic: str) -> str | None:
    """Produce one record; None when delivered, else the error's name."""
    outcome: list[str | None] = []
    producer.produce(topic, b"by-token", on_delivery=lambda err, _msg: outcome.append(
        None if err is None else err.name()))
    producer.flush(30)
    assert outcome, "no delivery report within 30 s"
    return outcome[0]


def test_confluent_kafka_produces_with_a_token(server: Standalone) -> None:
    created = trio.run(create_token, server.kafka_port, "alice")
    assert created["error_code"] == 0, created
    producer = _producer(server, created["token_id"], password_of(created))
    assert _deliver(producer, OK_TOPIC) is None
    assert _deliver(producer, DENIED_TOPIC) == "TOPIC_AUTHORIZATION_FAILED"
    producer.flush(5)

    async def expire() -> None:
        alice = await login(server.kafka_port, "alice")
        try:
            answer = await alice.request(EXPIRE, 2, {"hmac": created["hmac"],
                                                     "expiry_time_period_ms": -1})
            assert answer["error_code"] == 0, answer
        finally:
            await alice.aclose()
    trio.run(expire)
    errors: list[KafkaError] = []
    late = _producer(server, created["token_id"], password_of(created), errors)
    late.produce(OK_TOPIC, b"too-late")
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        late.poll(0.5)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    # the user's own password still logs in as before
    assert _deliver(_producer(server, "alice", PASSWORDS["alice"]), OK_TOPIC) is None


@pytest.mark.slow
def test_java_clients_with_a_token(server: Standalone) -> None:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="alice" password="{PASSWORDS["alice"]}";')
    run = run_java("KafkaDelegationTokens", bootstrap=server.bootstrap, topic=OK_TOPIC,
                   denied_topic=DENIED_TOPIC, count=3, max_lifetime_ms=600000, timeout=180,
                   kafka={"security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas})
    created = run.one("created")
    assert created["owner"] == "User:alice" and created["hmac_length"] == 64
    assert created["max_ms"] - created["issue_ms"] == 600000
    assert created["token_id"] in {e["token_id"] for e in run.events("described")}
    assert all(e["same_hmac"] for e in run.events("described")
               if e["token_id"] == created["token_id"])
    assert run.one("renewed")["expiry_ms"] > created["issue_ms"]
    assert len(run.events("sent")) == 3
    errors = {e["step"]: e["error"] for e in run.events("error")}
    assert errors.get("denied") == "TopicAuthorizationException", run.stdout
    assert errors.get("token_admin") == "UnsupportedByAuthenticationException", run.stdout
    assert run.events("expired")
    assert errors.get("after_expiry") == "SaslAuthenticationException", run.stdout


def test_token_survives_kill_9(server: Standalone) -> None:
    """Tokens are durable metadata: created, then the standalone killed -9 and started again,
    the token still logs in (last in the module: it restarts the shared standalone)."""
    created = trio.run(create_token, server.kafka_port, "alice")
    assert created["error_code"] == 0, created
    server.kill()
    server.start()

    async def after_restart() -> None:
        client, answer = await token_login(server.kafka_port, created["token_id"],
                                           password_of(created))
        try:
            assert answer["error_code"] == 0, answer
            assert await produce_one(client, OK_TOPIC) == 0
        finally:
            await client.aclose()
    trio.run(after_restart)
