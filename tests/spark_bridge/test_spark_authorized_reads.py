"""Authorized reads (issue 27): on a SASL standalone with ACLs on, a Spark read that names a
principal gets the brokers' answer first -- alice, with READ on one topic, reads it; she is
refused the other topic by spark.read and by `ledgerwire replay` (one line, before any Spark
job), and a wrong password is refused at login. (The executors' own storage reads are not
checked yet: see spark_bridge/authorization.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.standalone import Standalone

from spark_bridge.cli import replay_main
from tests.support.secured_standalone import PASSWORDS, secured_standalone

pytestmark = [pytest.mark.integration]

GRANTED, GUARDED = "granted", "guarded"


def _as(user: str, password: str | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password or PASSWORDS[user]}  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    sa = secured_standalone(tmp_path_factory.mktemp("spark-acls"))
    sa.start()
    try:
        admin = AdminClient({"bootstrap.servers": sa.bootstrap, **_as("admin")})
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in (GRANTED, GUARDED)]
                                          ).values():  # fmt: skip
            future.result(30)
        for future in admin.create_acls([AclBinding(
                ResourceType.TOPIC, GRANTED, ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW)]).values():  # fmt: skip
            future.result(30)
        producer = Producer({"bootstrap.servers": sa.bootstrap, **_as("admin")})
        for i in range(200):
            for topic in (GRANTED, GUARDED):
                producer.produce(topic, b"v%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        del producer, admin  # no client left retrying the stopped broker
        yield sa
    finally:
        sa.stop()


def _read(spark: Any, sa: Standalone, topic: str, **kafka: str) -> Any:
    return (spark.read.format("ledgerwire").option("ledgerwire.metadata", str(sa.data_dir))
            .option("subscribe", topic).option("kafka.bootstrap.servers", sa.bootstrap)
            .option("kafka.security.protocol", "SASL_PLAINTEXT")
            .option("kafka.sasl.mechanism", "PLAIN").options(**kafka).load())  # fmt: skip


def _jaas(user: str, password: str) -> dict[str, str]:
    return {"kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                      f'required username="{user}" password="{password}";'}


def test_a_principal_reads_only_what_its_acls_allow(spark: Any, secured: Standalone) -> None:
    assert _read(spark, secured, GRANTED, **_jaas("alice", PASSWORDS["alice"])).count() == 200
    with pytest.raises(Exception, match="User:alice may not read topic 'guarded'"):
        _read(spark, secured, GUARDED, **_jaas("alice", PASSWORDS["alice"])).count()
    with pytest.raises(Exception, match="refused the login of User:alice"):
        _read(spark, secured, GRANTED, **_jaas("alice", "wrong")).count()
    with pytest.raises(Exception, match="kafka.sasl.jaas.config"):
        _read(spark, secured, GRANTED).count()  # SASL named but no credentials


def test_replay_refuses_an_unauthorized_topic_in_one_line(
        secured: Standalone, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "alice.pw"
    secret.write_text(PASSWORDS["alice"] + "\n")
    code = replay_main(["--topic", GUARDED, "--to", str(tmp_path / "out"),
                        "--metadata", str(secured.data_dir), "--user", "alice",
                        "--password-file", str(secret), "--sasl-mechanism", "PLAIN",
                        "--bootstrap-servers", secured.bootstrap, "--master", "local[1]"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "ledgerwire replay: User:alice may not read topic 'guarded' (no READ in the cluster's "
        "ACLs)"] or "may not read topic 'guarded'" in err.strip().splitlines()[-1], err
    assert not (tmp_path / "out").exists()
