"""[kafka] security_protocol / [security] settings and what setup_kafka_security builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.loading import load_config
from gateway.config.settings import ConfigError
from gateway.security.credentials import CredentialStore
from gateway.security.setup import setup_kafka_security
from ledger_backend.metadata import open_store
from tests.support.security_stack import make_self_signed_cert


def test_security_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config(None, {"kafka.security_protocol": "SASL_SSL"})  # no certificate
    with pytest.raises(ConfigError):
        load_config(None, {"kafka.security_protocol": "KERBEROS"})
    with pytest.raises(ConfigError):
        load_config(None, {"security.authorization": "maybe"})
    config = load_config(None, {"kafka.security_protocol": "SASL_PLAINTEXT"})
    assert config.security.authorization_enabled("SASL_PLAINTEXT")
    assert not config.security.authorization_enabled("PLAINTEXT")


async def test_setup_applies_users_from_config_and_users_file(tmp_path: Path) -> None:
    cert, key = make_self_signed_cert(tmp_path)
    users_file = tmp_path / "users.toml"
    users_file.write_text('[[users]]\nname = "filed"\npassword = "f-pw"\n'
                          'mechanisms = ["SCRAM-SHA-256"]\n')
    config_file = tmp_path / "lw.toml"
    config_file.write_text(f"""
[kafka]
security_protocol = "SASL_SSL"
ssl_certfile = "{cert}"
ssl_keyfile = "{key}"
sasl_mechanisms = ["SCRAM-SHA-512"]
[security]
users_file = "{users_file}"
super_users = ["User:inline"]
users = [{{ name = "inline", password = "i-pw" }}]
""")
    config = load_config(config_file)
    store = await open_store("memory:")
    try:
        security = await setup_kafka_security(config, store)
        assert security.ssl_context is not None
        assert security.sasl_mechanisms == ("SCRAM-SHA-512",)
        assert security.authorizer.enabled and "User:inline" in security.authorizer.super_users
        users = await CredentialStore(store).list_users()
        assert users == {"filed": ["SCRAM-SHA-256"],
                         "inline": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
        credential = await security.credentials.lookup("filed", "PLAIN")
        assert credential is not None and credential.check_password("f-pw")
        # applying the same users again writes nothing (passwords still match)
        assert not await security.credentials.ensure_user("inline", "i-pw")
        assert await security.credentials.ensure_user("inline", "new-pw")
        assert await security.credentials.delete("filed")
        assert not await security.credentials.delete("filed")
    finally:
        await store.close()
