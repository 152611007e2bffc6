"""The inter-broker login of gateway/cluster/peer_client.py: the sans-IO SASL client
(protocols/kafka/sasl_client.py) against the server's own SaslSession, then PeerClient against
an in-process broker with a SASL (and a SASL_SSL) listener, the [security] inter_broker_*
settings, and the start-up check of cluster_services.setup_inter_broker_security.

Every test here fails without the inter-broker SASL support: the old PeerClient spoke plaintext
without a login, and a SASL listener closes such a connection.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.security_stack import make_self_signed_cert, secure_stack

from gateway.cluster.peer_client import (
    PeerAuthenticationError,
    PeerClient,
    PeerSecurity,
    PeerUnavailableError,
    peer_client_ssl_context,
    peer_security_from_config,
)
from gateway.config.loading import load_config
from gateway.config.settings import Config, ConfigError
from gateway.process.cluster_services import (
    check_inter_broker_credential,
    setup_inter_broker_security,
)
from gateway.security.acl_store import AclStore, Authorizer
from gateway.security.credentials import CredentialStore
from ledger_backend.metadata import open_store
from protocols.kafka.errors import SaslAuthenticationFailedError
from protocols.kafka.sasl import ALL_MECHANISMS, PLAIN, SaslSession, make_credential
from protocols.kafka.sasl_client import SaslClient

BROKER_USER, BROKER_PASSWORD = "broker", "broker-s3cret-pw"
METADATA, METADATA_VERSION = 3, 1


# --- the sans-IO client against the server's state machine -----------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_logs_in_to_the_server_session(mechanism: str) -> None:
    credential = make_credential(mechanism, "pw,=odd", iterations=4096)
    server = SaslSession(ALL_MECHANISMS)
    server.handshake(mechanism, 1)
    client = SaslClient(mechanism, "us=er,x", "pw,=odd")
    first = client.first_token()
    assert server.username_in(first) == "us=er,x"  # the name is escaped on the wire
    server_first = server.authenticate(first, credential)
    final = client.next_token(server_first)
    assert client.awaiting_server_final
    client.finish(server.authenticate(final, None))
    assert server.principal == "User:us=er,x" and client.done


def test_scram_client_refuses_a_server_that_does_not_know_the_credential() -> None:
    mechanism = "SCRAM-SHA-512"
    server = SaslSession(ALL_MECHANISMS)
    server.handshake(mechanism, 1)
    client = SaslClient(mechanism, "u", "right")
    # an impostor holding another credential (same salt) cannot sign the exchange
    real = make_credential(mechanism, "right")
    forged = make_credential(mechanism, "other", salt=real.salt)
    server_first = server.authenticate(client.first_token(), forged)
    client.next_token(server_first)
    with pytest.raises(SaslAuthenticationFailedError):
        client.finish(b"v=" + b"QUFBQQ==")


@pytest.mark.parametrize("server_first, why", [
    (b"r=someone-elses-nonce,s=c2FsdA==,i=4096", "nonce"),
    (b"r=NONCEmore,s=c2FsdA==,i=1", "iterations"),
    (b"e=unknown-user", "refused"),
])
def test_scram_client_rejects_bad_server_first(server_first: bytes, why: str) -> None:
    client = SaslClient("SCRAM-SHA-256", "u", "p", nonce="NONCE")
    client.first_token()
    with pytest.raises(SaslAuthenticationFailedError, match=why):
        client.next_token(server_first)


def test_plain_token_and_no_challenge() -> None:
    client = SaslClient(PLAIN, "u", "p")
    assert client.first_token() == b"\0u\0p"
    with pytest.raises(SaslAuthenticationFailedError):
        client.next_token(b"r=x")


# --- PeerClient against an in-process SASL broker ---------------------------------------------

def _security(mechanism: str, password: str = BROKER_PASSWORD, context: Any = None
              ) -> PeerSecurity:
    return PeerSecurity(context, mechanism, BROKER_USER, password)


async def _metadata(peers: PeerClient, port: int) -> dict[str, Any]:
    return await peers.request("127.0.0.1", port, METADATA, METADATA_VERSION, {"topics": []})


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
async def test_peer_client_logs_in_once_per_connection(
        mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ledgerwire")
    async with secure_stack(sasl_mechanisms=ALL_MECHANISMS, users={BROKER_USER: BROKER_PASSWORD},
                            authorization=True, super_users=(f"User:{BROKER_USER}",)) as stack:
        peers = PeerClient("test-broker-1", security=_security(mechanism))
        try:
            for _ in range(3):
                answer = await _metadata(peers, stack.port)
                assert [b["node_id"] for b in answer["brokers"]] == [1]
        finally:
            await peers.aclose()
    logins = [r for r in caplog.records if r.getMessage() == "SASL authentication succeeded"]
    assert len(logins) == 1  # one connection, reused
    assert getattr(logins[0], "principal", None) == f"User:{BROKER_USER}"
    assert getattr(logins[0], "mechanism", None) == mechanism


async def test_peer_client_without_a_login_is_refused_by_a_sasl_listener() -> None:
    async with secure_stack(sasl_mechanisms=ALL_MECHANISMS,
                            users={BROKER_USER: BROKER_PASSWORD}) as stack:
        peers = PeerClient("test-broker-1")  # what every broker did before: no SASL
        try:
            with pytest.raises(PeerUnavailableError):
                await _metadata(peers, stack.port)
        finally:
            await peers.aclose()


async def test_wrong_password_is_a_clear_error_then_fails_fast(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    wrong = "not-the-broker-pw"
    async with secure_stack(sasl_mechanisms=ALL_MECHANISMS,
                            users={BROKER_USER: BROKER_PASSWORD}) as stack:
        peers = PeerClient("test-broker-1", security=_security("PLAIN", wrong))
        try:
            with pytest.raises(PeerAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                await _metadata(peers, stack.port)
            started = time.monotonic()
            with pytest.raises(PeerAuthenticationError):  # backoff: not sent again yet
                await _metadata(peers, stack.port)
            assert time.monotonic() - started < 0.5
        finally:
            await peers.aclose()
    refused = [r for r in caplog.records if r.name == "ledgerwire.peers"]
    assert len(refused) == 1 and refused[0].levelno == logging.ERROR
    text = refused[0].getMessage()
    assert "inter_broker_password" in text and repr(BROKER_USER) in text
    server_failures = [r for r in caplog.records
                       if r.getMessage() == "SASL authentication failed"]
    assert len(server_failures) == 1  # the backoff spared the peer a second PBKDF2
    everything = caplog.text + "".join(repr(r.__dict__) for r in caplog.records)
    assert wrong not in everything and BROKER_PASSWORD not in everything
    assert wrong not in repr(_security("PLAIN", wrong))


async def test_unknown_mechanism_on_the_peer_is_named(tmp_path: Path) -> None:
    async with secure_stack(sasl_mechanisms=("SCRAM-SHA-256",),
                            users={BROKER_USER: BROKER_PASSWORD}) as stack:
        peers = PeerClient("test-broker-1", security=_security("SCRAM-SHA-512"))
        try:
            with pytest.raises(PeerAuthenticationError, match="SCRAM-SHA-512.*SCRAM-SHA-256"):
                await _metadata(peers, stack.port)
        finally:
            await peers.aclose()


async def test_sasl_ssl_peer_trusts_the_listener_certificate(tmp_path: Path) -> None:
    cert, key = make_self_signed_cert(tmp_path)
    config = load_config(None, {"kafka.security_protocol": "SASL_SSL",
                                "kafka.ssl_certfile": str(cert), "kafka.ssl_keyfile": str(key),
                                "security.inter_broker_user": BROKER_USER,
                                "security.inter_broker_password": BROKER_PASSWORD})
    security = peer_security_from_config(config)
    assert security.ssl_context is not None and security.sasl_mechanism == "SCRAM-SHA-512"
    async with secure_stack(sasl_mechanisms=ALL_MECHANISMS, tls=(cert, key),
                            users={BROKER_USER: BROKER_PASSWORD}) as stack:
        peers = PeerClient("test-broker-1", security=security)
        try:
            assert (await _metadata(peers, stack.port))["brokers"]
        finally:
            await peers.aclose()
        # the same listener, without TLS on the client side: no answer
        plain = PeerClient("test-broker-1", timeout_s=2.0,
                           security=PeerSecurity(None, "PLAIN", BROKER_USER, BROKER_PASSWORD))
        try:
            with pytest.raises(PeerUnavailableError):
                await _metadata(plain, stack.port)
        finally:
            await plain.aclose()


# --- configuration ---------------------------------------------------------------------------

def _sasl_config(**security: Any) -> Config:
    return load_config(None, {"kafka.security_protocol": "SASL_PLAINTEXT",
                              **{f"security.{k}": v for k, v in security.items()}})


def test_password_from_setting_file_or_environment(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert peer_security_from_config(
        _sasl_config(inter_broker_user="b", inter_broker_password="one")).password == "one"
    (tmp_path / "pw").write_text("two\n")
    from_file = peer_security_from_config(_sasl_config(
        inter_broker_user="b", inter_broker_password_file=str(tmp_path / "pw")))
    assert from_file.password == "two" and "two" not in repr(from_file)
    monkeypatch.setenv("LEDGERWIRE_INTER_BROKER_PASSWORD", "three")
    assert peer_security_from_config(_sasl_config(inter_broker_user="b")).password == "three"
    monkeypatch.delenv("LEDGERWIRE_INTER_BROKER_PASSWORD")
    with pytest.raises(ConfigError, match="no password"):
        peer_security_from_config(_sasl_config(inter_broker_user="b"))
    with pytest.raises(ConfigError, match="inter_broker_password_file"):
        peer_security_from_config(_sasl_config(
            inter_broker_user="b", inter_broker_password_file=str(tmp_path / "missing")))
    # no SASL listener, or no user: no login
    assert peer_security_from_config(_sasl_config()).sasl_mechanism is None
    assert peer_security_from_config(load_config(None, {
        "security.inter_broker_user": "b"})).sasl_mechanism is None


def test_inter_broker_mechanism_is_validated() -> None:
    with pytest.raises(ConfigError, match="inter_broker_mechanism"):
        _sasl_config(inter_broker_mechanism="GSSAPI")
    with pytest.raises(ConfigError, match="not one of kafka.sasl_mechanisms"):
        load_config(None, {"kafka.security_protocol": "SASL_PLAINTEXT",
                           "kafka.sasl_mechanisms": ["PLAIN"],
                           "security.inter_broker_user": "b",
                           "security.inter_broker_password": "p"})


def test_ssl_context_needs_a_readable_ca(tmp_path: Path) -> None:
    config = _sasl_config(inter_broker_ssl_cafile=str(tmp_path / "nope.pem"))
    with pytest.raises(ConfigError, match="CA file"):
        peer_client_ssl_context(config)


async def _kafka_security(users: dict[str, str]) -> Any:
    store = await open_store("memory:")
    credentials = CredentialStore(store)
    for name, password in users.items():
        await credentials.ensure_user(name, password)
    authorizer = Authorizer(AclStore(store), enabled=True, super_users=["User:admin"])
    return store, SimpleNamespace(credentials=credentials, authorizer=authorizer)


async def test_setup_makes_the_broker_a_super_user_and_checks_its_password(
        caplog: pytest.LogCaptureFixture) -> None:
    store, security = await _kafka_security({BROKER_USER: BROKER_PASSWORD})
    try:
        peers = await setup_inter_broker_security(_sasl_config(
            inter_broker_user=BROKER_USER, inter_broker_password=BROKER_PASSWORD,
            inter_broker_mechanism="PLAIN"), security)
        assert peers.sasl_mechanism == "PLAIN"
        assert security.authorizer.super_users == {"User:admin", f"User:{BROKER_USER}"}
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        # opting out: the operator grants CLUSTER_ACTION instead
        _, other = await _kafka_security({})
        await setup_inter_broker_security(_sasl_config(
            inter_broker_user=BROKER_USER, inter_broker_password=BROKER_PASSWORD,
            inter_broker_super_user=False), other)
        assert other.authorizer.super_users == {"User:admin"}
        # a wrong password is an error at start, and nothing stops
        caplog.clear()
        wrong = PeerSecurity(None, "SCRAM-SHA-512", BROKER_USER, "wrong-one")
        assert not await check_inter_broker_credential(security.credentials, wrong)
        assert not await check_inter_broker_credential(
            security.credentials, PeerSecurity(None, "SCRAM-SHA-512", "nobody", "x"))
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 2
        assert "does not match" in errors[0] and "no SCRAM-SHA-512 credential" in errors[1]
        assert "wrong-one" not in caplog.text
    finally:
        await store.close()


async def test_setup_warns_when_a_sasl_cluster_has_no_inter_broker_user(
        caplog: pytest.LogCaptureFixture) -> None:
    store, security = await _kafka_security({})
    try:
        peers = await setup_inter_broker_security(_sasl_config(), security)
        assert peers.sasl_mechanism is None
        assert any("inter_broker_user is not set" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING)
    finally:
        await store.close()
