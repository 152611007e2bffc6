"""Secrets at rest and the standalone's bookies (issue 26 parts 4 and 7).

A `ledgerwire standalone` with a bookie secret and a ledger password: its data directory is
owner-only, its bookie port serves nobody without the secret, Kafka clients work unchanged, and
a secrets file or a config file holding passwords that other users can read is a start-up
WARNING."""

from __future__ import annotations

import socket
import stat
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from gateway.config.loading import exposed_secrets_warning
from gateway.config.settings import Config
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.protocol import ReadEntryRequest, Status, encode
from ledger_backend.secret_files import make_private_dir
from tests.support.ledger_passwords import ledger_password_hashes
from tests.support.standalone import Standalone

pytestmark = pytest.mark.integration


def test_private_dirs(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert stat.S_IMODE(make_private_dir(loose).stat().st_mode) == 0o700
    assert stat.S_IMODE(make_private_dir(tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_a_config_file_with_passwords_must_be_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "ledgerwire.toml"
    path.write_text("")
    config = Config()
    config.security.users = [{"name": "admin", "password": "pw"}]
    path.chmod(0o644)
    warning = exposed_secrets_warning(config, path)
    assert warning is not None and "security.users" in warning and "pw" not in warning
    path.chmod(0o600)
    assert exposed_secrets_warning(config, path) is None
    path.chmod(0o644)
    assert exposed_secrets_warning(Config(), path) is None  # nothing secret in it


def test_standalone_with_a_bookie_secret(tmp_path: Path) -> None:
    secret = tmp_path / "bookie.secret"
    secret.write_text("standalone-bookie-secret-42\n")
    secret.chmod(0o644)  # readable by others: a warning, still used
    config = tmp_path / "ledgerwire.toml"
    config.write_text('[security]\nusers = [{ name = "admin", password = "admin-pw" }]\n')
    config.chmod(0o644)
    password = tmp_path / "ledger.password"
    password.write_text("ledger-password\n")
    password.chmod(0o600)
    server = Standalone(tmp_path / "data", extra_args=[
        "--bookie-secret-file", str(secret), "--config", str(config),
        "--ledger-password-file", str(password)])
    server.start()
    try:
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        log = server.log()
        assert "bookie secret file" in log and "readable by other users" in log
        assert "holds secrets (security.users passwords)" in log
        assert "standalone-bookie-secret-42" not in log and "admin-pw" not in log
        assert "ledger password file" not in log  # 0600: no warning

        with socket.create_connection(("127.0.0.1", server.bookie_port), timeout=10) as raw:
            raw.sendall(encode(ReadEntryRequest(1, 1, 0)))
            answer = FrameDecoder(accept="responses").feed(raw.recv(1 << 16))
            assert [getattr(a, "status", None) for a in answer] == [Status.UNAUTHORIZED]

        topic = f"secrets-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": server.bootstrap})
        producer.produce(topic, b"still works")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})  # fmt: skip
        try:
            consumer.subscribe([topic])
            message = None
            for _ in range(60):
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    break
            assert message is not None and message.value() == b"still works"
        finally:
            consumer.close()
        hashes = ledger_password_hashes(f"embedded-ro:{tmp_path / 'data' / 'metadata'}")
        assert hashes and all(hashes)  # the broker's ledgers all carry the password's hash
    finally:
        server.stop()
