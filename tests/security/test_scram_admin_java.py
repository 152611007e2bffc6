"""SCRAM users managed through the Kafka API by Apache Kafka's Java AdminClient 4.3
(describeUserScramCredentials / alterUserScramCredentials, what `kafka-configs.sh
--entity-type users` uses) on a secured `ledgerwire standalone`.  The credentials land in the
same store as `ledgerwire users` and the SASL logins: a user added over the Kafka API logs in
with SCRAM, `ledgerwire users list` shows it, and the configured users are described.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.java_clients import JavaServer
from tests.support.secured_standalone import PASSWORDS, secured_standalone
from tests.support.standalone import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def java_admin(bootstrap: str, user: str) -> JavaServer:
    """One Java Admin (one JVM) logged in as `user`, for several calls."""
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{user}" password="{PASSWORDS[user]}";')
    return JavaServer("KafkaAdmin", bootstrap=bootstrap, kafka={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas})


def scram_login_works(bootstrap: str, user: str, password: str) -> bool:
    client = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                          "sasl.password": password, "log_level": 0})
    try:
        client.list_topics(timeout=10)
        return True
    except Exception:  # noqa: BLE001 - a refused login is the answer
        return False


def check_scram_calls(boot: str, admin: JavaServer, mallory: JavaServer) -> None:
    """SCRAM credentials described, added, refused and denied through the Java Admin."""
    configured = admin.call(op="describe_scram")
    users = {e["user"]: e["credentials"] for e in configured.events("scram_user")}
    assert set(users) == set(PASSWORDS)
    assert {c["mechanism"] for c in users["alice"]} == {"SCRAM-SHA-256", "SCRAM-SHA-512"}

    added = admin.call(op="alter_scram", upsert="carol:SCRAM-SHA-512:8192:carol-pw")
    assert added.one("altered")["user"] == "carol"
    carol = admin.call(op="describe_scram", users="carol")
    assert carol.one("scram_user")["credentials"] == [
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    assert scram_login_works(boot, "carol", "carol-pw")
    assert not scram_login_works(boot, "carol", "wrong-pw")

    bad = admin.call(op="alter_scram", upsert="dave:SCRAM-SHA-256:1000:x")
    assert bad.one("error")["error"] == "UnacceptableCredentialException"
    missing = admin.call(op="alter_scram", delete="carol:SCRAM-SHA-256")
    assert missing.one("error")["error"] == "ResourceNotFoundException"
    nobody = admin.call(op="describe_scram", users="nobody")
    assert nobody.one("error")["error"] == "ResourceNotFoundException"

    refused = mallory.call(op="alter_scram", upsert="mallory:SCRAM-SHA-512:4096:mine")
    assert refused.one("error")["error"] == "ClusterAuthorizationException"
    peek = mallory.call(op="describe_scram")
    assert peek.one("error")["error"] == "ClusterAuthorizationException"


def test_scram_credentials_through_the_kafka_api(tmp_path: Path) -> None:
    server = secured_standalone(tmp_path / "scram")
    server.start()
    try:
        boot = server.bootstrap
        with java_admin(boot, "admin") as admin, java_admin(boot, "mallory") as mallory:
            check_scram_calls(boot, admin, mallory)
    finally:
        server.stop()
    listed = subprocess.run([sys.executable, "-m", "gateway", "users", "list", "--metadata",
                             str(server.data_dir)], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "carol" in listed.stdout

    server.start()  # the same store again: delete over the Kafka API, the login stops working
    try:
        with java_admin(server.bootstrap, "admin") as admin:
            gone = admin.call(op="alter_scram", delete="carol:SCRAM-SHA-512")
            assert gone.one("altered")["user"] == "carol"
            after = admin.call(op="describe_scram", users="carol")
            assert after.one("error")["error"] == "ResourceNotFoundException"
        assert not scram_login_works(server.bootstrap, "carol", "carol-pw")
    finally:
        server.stop()
