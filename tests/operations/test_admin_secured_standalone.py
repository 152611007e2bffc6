"""The admin surface of a real secured `ledgerwire standalone` (subprocess), as an outsider
and as the operators: the hole issue 13 reported (anyone could create and delete topics over
HTTP on a SASL broker) is closed, the CLI passes credentials, tokens work, refusals are logged,
and on SASL_SSL the admin listener speaks HTTPS with the Kafka listener's certificate."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.secured_standalone import PASSWORDS, secured_standalone
from tests.support.security_stack import make_self_signed_cert
from tests.support.standalone import REPO, Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def http(url: str, method: str = "GET", body: Any = None, *, user: str | None = None,
         password: str | None = None, token: str | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if user is not None:
        pair = f"{user}:{PASSWORDS.get(user, '') if password is None else password}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_for_admin(server: Standalone, scheme: str = "http",
                   context: ssl.SSLContext | None = None) -> None:
    """The Kafka port accepts a little before the admin listener does."""
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{scheme}://127.0.0.1:{server.admin_port}/health",
                                   timeout=5, context=context).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def admin_cli(server: Standalone, *args: str, env: dict[str, str] | None = None,
              scheme: str = "http") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "admin", *args, "--admin-url",
         f"{scheme}://127.0.0.1:{server.admin_port}", "--json"], cwd=REPO, capture_output=True,
        text=True, timeout=60, env={**os.environ, **(env or {})})


def test_secured_standalone_admin_api_needs_credentials(tmp_path: Path) -> None:
    server = secured_standalone(tmp_path)
    server.start()
    wait_for_admin(server)
    base = f"http://127.0.0.1:{server.admin_port}"
    try:
        # the reported hole: anonymous create and delete
        assert http(f"{base}/admin/v1/topics/secret-topic", "PUT", {"partitions": 1})[0] == 401
        assert http(f"{base}/admin/v1/topics/secret-topic", "PUT", {"partitions": 1},
                    user="admin", password="wrong")[0] == 401
        assert http(f"{base}/admin/v1/topics/secret-topic", "PUT", {"partitions": 1},
                    user="mallory")[0] == 403
        assert http(f"{base}/admin/v1/topics/secret-topic", "PUT", {"partitions": 1},
                    user="admin")[0] == 201
        for method, path in [("GET", "/admin/v1/topics"), ("GET", "/admin/v1/brokers"),
                             ("GET", "/admin/v1/groups"), ("POST", "/admin/v1/retention/run"),
                             ("DELETE", "/admin/v1/topics/secret-topic"), ("GET", "/metrics"),
                             ("GET", "/"), ("GET", "/console/topics")]:
            assert http(base + path, method, {} if method == "POST" else None)[0] == 401, path
        assert http(f"{base}/admin/v1/topics/secret-topic", "DELETE", user="mallory")[0] == 403
        assert http(f"{base}/health")[0] == 200 and http(f"{base}/ready")[0] == 200
        status, metrics = http(f"{base}/metrics", user="admin")
        assert status == 200 and "ledgerwire_start_time_seconds" in metrics

        # the CLI: refused without credentials (with a hint), fine with them
        refused = admin_cli(server, "topics", "list")
        assert refused.returncode == 1 and "--user" in refused.stderr
        listed = admin_cli(server, "topics", "list", env={"LEDGERWIRE_ADMIN_USER": "admin",
                                                          "LEDGERWIRE_ADMIN_PASSWORD": "admin-pw"})
        assert listed.returncode == 0, listed.stderr
        assert "secret-topic" in [t["topic"] for t in json.loads(listed.stdout)]

        # a token for alice, made through the API by the super user: alice's ACLs (none)
        made = admin_cli(server, "tokens", "create", "User:alice", "--user", "admin",
                         "--password", "admin-pw")
        assert made.returncode == 0, made.stderr
        token = json.loads(made.stdout)["token"]
        assert http(f"{base}/admin/v1/topics", token=token) == (200, [])
        assert http(f"{base}/admin/v1/topics/secret-topic", "DELETE", token=token)[0] == 403
        assert http(f"{base}/admin/v1/topics/secret-topic", "DELETE", user="admin")[0] == 200
        assert "admin request refused" in server.log()
        assert "alice-pw" not in server.log() and token not in server.log()
    finally:
        server.stop()


def test_sasl_ssl_standalone_serves_the_admin_api_over_https(tmp_path: Path) -> None:
    cert, key = make_self_signed_cert(tmp_path)
    server = secured_standalone(tmp_path / "s", extra="")
    config = Path(server.extra_args[-1])
    config.write_text(config.read_text().replace(
        'security_protocol = "SASL_PLAINTEXT"',
        f'security_protocol = "SASL_SSL"\nssl_certfile = "{cert}"\nssl_keyfile = "{key}"'))
    server.start()
    try:
        context = ssl.create_default_context(cafile=str(cert))
        wait_for_admin(server, "https", context)
        base = f"https://127.0.0.1:{server.admin_port}"
        assert http(f"{base}/admin/v1/brokers", context=context)[0] == 401
        status, brokers = http(f"{base}/admin/v1/brokers", user="admin", context=context)
        assert status == 200 and brokers[0]["broker_id"] == 0
        with pytest.raises(OSError):  # plain HTTP is not served there
            urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/health", timeout=10)
        listed = admin_cli(server, "brokers", "list", scheme="https", env={
            "LEDGERWIRE_ADMIN_USER": "admin", "LEDGERWIRE_ADMIN_PASSWORD": "admin-pw",
            "LEDGERWIRE_ADMIN_CAFILE": str(cert)})
        assert listed.returncode == 0, listed.stderr
    finally:
        server.stop()


def test_tokens_cli_on_a_stopped_standalones_store(tmp_path: Path) -> None:
    """`ledgerwire tokens create|list|revoke --metadata DATA_DIR`: the token is printed once,
    the store keeps only its hash, and a revoked id is gone."""
    def tokens(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway", "tokens", *args, "--metadata",
                               str(tmp_path / "data")], cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    made = tokens("create", "User:alice", "--ttl", "3600", "--description", "ci")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("lwt_") and "shown only now" in made.stderr
    token_id = token.split("_")[1]
    listed = tokens("list")
    assert listed.returncode == 0 and token_id in listed.stdout and "User:alice" in listed.stdout
    assert token.split("_", 2)[2] not in listed.stdout
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert token.split("_", 2)[2].encode() not in stored  # only the SHA-256 is kept
    assert tokens("create", "alice").returncode == 1  # not User:NAME
    assert tokens("revoke", token_id).returncode == 0
    assert token_id not in tokens("list").stdout
    assert tokens("revoke", token_id).returncode == 1
