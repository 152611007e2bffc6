"""Backfill executors write with a Kafka delegation token, never the password (issue 27).

A SASL standalone with ACLs and a delegation token secret key; alice may WRITE (and READ)
`tokfill` and nothing on `tokdenied`.  `ledgerwire backfill --user alice` writes every row
through a token the driver obtains, and expires it when the job ends; the writer that Spark
ships to the executors holds the token id and HMAC and not alice's password; a token logs in as
alice (her ACLs: the executors' producer settings are refused on `tokdenied`; the CLI refuses
a backfill without WRITE before any job, tests/spark_bridge/test_spark_authorized_reads.py),
and once expired by the driver or past its max lifetime it is refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from spark_bridge.authorization import read_principal
from spark_bridge.cli import backfill_main
from spark_bridge.job_tokens import (
    DELEGATION_TOKEN_OPTION,
    JobToken,
    create_job_token,
    expire_job_token,
    token_client_config,
)
from tests.support.secured_standalone import PASSWORDS, running, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration]

FILL, DENIED = "tokfill", "tokdenied"


def _as(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    home = tmp_path_factory.mktemp("spark-tokens")
    with running(secured_standalone(
            home, extra='delegation_token_secret_key = "spark-token-key-0123456"')) as sa:
        admin = AdminClient({"bootstrap.servers": sa.bootstrap, **_as("admin")})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in (FILL, DENIED)]
                                          ).values():  # fmt: skip
            future.result(30)
        for future in admin.create_acls([AclBinding(
                ResourceType.TOPIC, FILL, ResourcePatternType.LITERAL, "User:alice", "*",
                operation, AclPermissionType.ALLOW)
                for operation in (AclOperation.WRITE, AclOperation.READ)]).values():
            future.result(30)
        del admin
        yield sa


def _options(sa: Standalone, topic: str) -> dict[str, str]:
    """Spark's Kafka options naming alice with her password (as a user's df.write has them)."""
    return {"topic": topic, "kafka.bootstrap.servers": sa.bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "alice", "kafka.sasl.password": PASSWORDS["alice"]}


def _end_offset(sa: Standalone, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": sa.bootstrap, "group.id": "token-check",
                         **_as("admin")})  # fmt: skip
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def _deliver(config: dict[str, Any], topic: str, timeout_s: float = 30) -> str | None:
    """One record produced with `config`: None when delivered, else the error's name."""
    errors: list[KafkaError] = []
    outcome: list[str | None] = []
    producer = Producer({**config, "message.timeout.ms": int(timeout_s * 1000), "log_level": 0,
                         "delivery.report.only.error": False,
                         "error_cb": errors.append})  # fmt: skip
    producer.produce(topic, b"token-row", on_delivery=lambda err, _m: outcome.append(
        None if err is None else err.name()))
    deadline = time.monotonic() + timeout_s + 10
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return "_AUTHENTICATION"
    assert outcome, f"no delivery report within {timeout_s} s ({errors})"
    return outcome[0]


def _alice_tokens(sa: Standalone) -> list[str]:
    """The ids of alice's live delegation tokens, as the admin describes them (a wire call)."""
    import trio

    from tests.support.secured_standalone import login

    async def describe() -> list[str]:
        admin = await login(sa.kafka_port, "admin")
        try:
            answer = await admin.request(41, 3, {"owners": [
                {"principal_type": "User", "principal_name": "alice"}]})
            assert answer["error_code"] == 0, answer
            return [t["token_id"] for t in answer["tokens"]]
        finally:
            await admin.aclose()
    return trio.run(describe)


def test_backfill_writes_with_a_token_the_driver_expires(
        spark: Any, server: Standalone, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    secret = tmp_path / "alice.pw"
    secret.write_text(PASSWORDS["alice"] + "\n")
    source = tmp_path / "rows.json"
    source.write_text("".join(f'{{"value": "row {i}"}}\n' for i in range(30)))
    code = backfill_main(["--from", str(source), "--topic", FILL, "--metadata",
                          str(server.data_dir), "--user", "alice", "--password-file",
                          str(secret), "--bootstrap-servers", server.bootstrap,
                          "--master", "local[1]", "--no-ui"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert "the executors log in with delegation token" in err and "User:alice" in err
    assert PASSWORDS["alice"] not in err
    assert _end_offset(server, FILL) == 30
    assert _alice_tokens(server) == []  # the driver expired the job's token


def test_the_shipped_writer_holds_the_token_not_the_password(server: Standalone) -> None:
    """What Spark ships to the executors (the pickled writer) has the token id and HMAC and
    no password; its producer settings produce as alice, refused where she is refused."""
    from pyspark import cloudpickle
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_bridge.writer import LedgerwireBackfillWriter

    schema = StructType([StructField("value", BinaryType())])
    writer = LedgerwireBackfillWriter(_options(server, FILL), schema, False)
    shipped = cloudpickle.dumps(writer)
    assert PASSWORDS["alice"].encode() not in shipped
    config = writer.producer_config
    assert writer.token_id and config["sasl.username"] == writer.token_id
    assert config["sasl.password"].encode() in shipped and writer.token_id.encode() in shipped
    assert writer.token_id in _alice_tokens(server)
    before = _end_offset(server, FILL)
    assert _deliver(config, FILL) is None
    assert _end_offset(server, FILL) == before + 1
    assert _deliver(config, DENIED) == "TOPIC_AUTHORIZATION_FAILED"

    # a token the CLI passes on is used as is: no second token
    given = {**_options(server, FILL), "kafka.sasl.username": writer.token_id,
             "kafka.sasl.password": config["sasl.password"], DELEGATION_TOKEN_OPTION: "true"}
    again = LedgerwireBackfillWriter(given, schema, False)
    assert again.token_id == writer.token_id and _alice_tokens(server).count(writer.token_id) == 1


def test_expired_tokens_are_refused(server: Standalone) -> None:
    alice = read_principal({**_options(server, FILL)})
    assert alice is not None
    token = create_job_token(alice, 60_000)
    config = token_client_config({"bootstrap.servers": server.bootstrap,
                                  "security.protocol": "SASL_PLAINTEXT"}, token)
    assert _deliver(config, FILL) is None
    assert expire_job_token(alice, token)  # what the driver does when the job ends
    assert _deliver(config, FILL, timeout_s=10) == "_AUTHENTICATION"

    short = create_job_token(alice, 1_500)  # past its max lifetime on its own
    assert short.max_ms - short.expiry_ms <= 0 or short.max_ms <= short.expiry_ms + 1_500
    late = token_client_config({"bootstrap.servers": server.bootstrap,
                                "security.protocol": "SASL_PLAINTEXT"}, short)
    while time.time() * 1000 < short.max_ms + 100:
        time.sleep(0.1)  # the broker's clock is this machine's
    assert _deliver(late, FILL, timeout_s=10) == "_AUTHENTICATION"
    assert short.token_id not in _alice_tokens(server)


def test_no_tokens_is_one_clear_refusal() -> None:
    from protocols.kafka.errors import ErrorCode
    from spark_bridge.job_tokens import _refusal

    message = str(_refusal(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, "User:alice", "create"))
    assert "delegation_token_secret_key" in message
    assert "ledgerwire.executorCredentials=password" in message
    assert repr(JobToken("id", b"secret-hmac", "User:a", 1, 2)).count("secret") == 0
