"""Where the admin listener binds and whether it asks for credentials, from the settings:
an unsecured broker keeps the old open API but only on loopback (and says so at start); a
secured one authenticates, and never serves an open API on another address."""

from __future__ import annotations

import logging

import pytest

from gateway.admin.auth import AdminAuth
from gateway.admin.listener import announce
from gateway.config.loading import load_config
from gateway.config.settings import Config, ConfigError


def config(**overrides: object) -> Config:
    return load_config(None, {k: v for k, v in overrides.items()})


def test_plaintext_without_users_is_open_on_loopback_only(
        caplog: pytest.LogCaptureFixture) -> None:
    c = config()
    assert not c.admin_authentication()
    assert c.admin_listener() == "127.0.0.1:8080"
    with caplog.at_level(logging.INFO, logger="ledgerwire.admin"):
        announce(c, AdminAuth(required=False), 8080)
    assert "WITHOUT authentication (loopback only" in caplog.text


def test_an_explicit_open_non_loopback_listener_is_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    c = config(**{"admin.listener": "0.0.0.0:8080"})
    with caplog.at_level(logging.INFO, logger="ledgerwire.admin"):
        announce(c, AdminAuth(required=False), 8080)
    assert any(r.levelno == logging.WARNING and "reachable from other hosts" in r.getMessage()
               for r in caplog.records)


def test_secured_brokers_authenticate_and_listen_everywhere_by_default() -> None:
    c = config(**{"kafka.security_protocol": "SASL_PLAINTEXT"})
    assert c.admin_authentication() and c.admin_listener() == "0.0.0.0:8080"
    users = config(**{"security.users": [{"name": "a", "password": "b"}]})
    assert users.admin_authentication()  # PLAINTEXT, but admin credentials exist
    assert config(**{"admin.authentication": "on"}).admin_listener() == "0.0.0.0:8080"


def test_an_open_admin_api_on_a_secured_broker_must_stay_on_loopback() -> None:
    off = config(**{"kafka.security_protocol": "SASL_PLAINTEXT", "admin.authentication": "off"})
    assert off.admin_listener() == "127.0.0.1:8080"
    with pytest.raises(ConfigError, match="admin.authentication is off"):
        config(**{"kafka.security_protocol": "SASL_PLAINTEXT", "admin.authentication": "off",
                  "admin.listener": "0.0.0.0:8080"})
    with pytest.raises(ConfigError, match="admin.authentication is off"):
        config(**{"kafka.security_protocol": "SASL_PLAINTEXT", "admin.authentication": "off",
                  "admin.listener": "10.1.2.3:8080"})
    ok = config(**{"kafka.security_protocol": "SASL_PLAINTEXT", "admin.authentication": "off",
                   "admin.listener": "127.0.0.1:8080"})
    assert not ok.admin_authentication()
    assert config(**{"kafka.security_protocol": "SASL_PLAINTEXT", "admin.authentication": "off",
                     "admin.listener": ""}).admin_listener() == ""


def test_tls_follows_the_kafka_listener() -> None:
    c = config(**{"kafka.security_protocol": "SSL", "kafka.ssl_certfile": "c.pem",
                  "kafka.ssl_keyfile": "k.pem"})
    assert c.admin_tls() and c.admin_authentication()
    assert not config().admin_tls()
    with pytest.raises(ConfigError, match="admin.tls"):
        config(**{"admin.tls": "on"})
    with pytest.raises(ConfigError):
        config(**{"admin.authentication": "maybe"})
