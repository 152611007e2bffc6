"""`ledgerwire standalone` with SASL_SSL from its configuration, and `ledgerwire users`.

A real subprocess: TLS certificate and key from the TOML file, a super user from [security]
users, another user added beforehand with the CLI, ACLs enforced with
allow_everyone_if_no_acl_found=false, and the CLI refused (with a hint) while the standalone
holds its data directory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.security_stack import failed_login, make_self_signed_cert, produce, scram_ssl
from tests.support.standalone import REPO, Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def users_cli(*args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "users", *args], cwd=REPO,
                          input=password, capture_output=True, text=True, timeout=60)


def test_sasl_ssl_standalone_with_cli_users_and_acls(tmp_path: Path) -> None:
    cert, key = make_self_signed_cert(tmp_path)
    data_dir = tmp_path / "data"
    added = users_cli("add", "carol", "--password-stdin", "--mechanism", "SCRAM-SHA-512",
                      "--metadata", str(data_dir), password="carol-pw\n")
    assert added.returncode == 0, added.stderr
    config = tmp_path / "ledgerwire.toml"
    config.write_text(f"""
[kafka]
security_protocol = "SASL_SSL"
ssl_certfile = "{cert}"
ssl_keyfile = "{key}"

[security]
super_users = ["User:admin"]
users = [{{ name = "admin", password = "admin-pw" }}]
""")
    server = Standalone(data_dir, extra_args=["--config", str(config)])
    server.start()
    try:
        admin = AdminClient(scram_ssl(server.bootstrap, cert, "admin", "admin-pw"))
        for future in admin.create_topics([NewTopic("granted", 1, 1),
                                           NewTopic("not-granted", 1, 1)]).values():
            future.result(15)
        acls = [AclBinding(ResourceType.TOPIC, "granted", ResourcePatternType.LITERAL,
                           "User:carol", "*", AclOperation.WRITE, AclPermissionType.ALLOW)]
        for future in admin.create_acls(acls).values():
            future.result(15)
        carol = scram_ssl(server.bootstrap, cert, "carol", "carol-pw")
        assert produce(carol, "granted", 2) == [None, None]
        denied = produce(carol, "not-granted", 1)
        assert [e.code() if e else None for e in denied] == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED]
        seen = failed_login(scram_ssl(server.bootstrap, cert, "carol", "wrong"))
        assert any(e.code() == KafkaError._AUTHENTICATION for e in seen)

        locked = users_cli("add", "dave", "--password", "x", "--metadata", str(data_dir))
        assert locked.returncode == 1 and "[security] users" in locked.stderr
    finally:
        server.stop()
    listed = users_cli("list", "--metadata", str(data_dir))
    assert listed.returncode == 0
    assert {line.split("\t")[0] for line in listed.stdout.splitlines()} == {"admin", "carol"}
    assert "carol-pw" not in (data_dir.parent / "data-standalone.log").read_text()
