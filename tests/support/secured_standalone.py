"""A `ledgerwire standalone` with Kafka SASL_PLAINTEXT and ACLs on, and a wire login helper.

Users: `admin` (a super user), `mallory` and `alice` (no ACLs unless a test grants some).
The helpers speak only the wire (the project's Kafka codec over TCP, SaslHandshake +
SaslAuthenticate PLAIN), so the tests that use them play an outside client and import nothing
of the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.standalone import Standalone

PASSWORDS = {"admin": "admin-pw", "mallory": "mallory-pw", "alice": "alice-pw"}
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def secured_config(directory: Path, extra: str = "", extra_kafka: str = "") -> Path:
    """A TOML file: SASL_PLAINTEXT with PLAIN and SCRAM, ACLs on, the three users;
    `extra_kafka` lines go into [kafka], `extra` after everything."""
    users = ", ".join(f'{{ name = "{n}", password = "{p}" }}' for n, p in PASSWORDS.items())
    path = directory / "secured.toml"
    path.write_text(f"""
[kafka]
security_protocol = "SASL_PLAINTEXT"
sasl_mechanisms = ["PLAIN", "SCRAM-SHA-512"]
{extra_kafka}

[security]
authorization = "on"
super_users = ["User:admin"]
users = [{users}]
{extra}
""")
    return path


def secured_standalone(directory: Path, extra: str = "", extra_kafka: str = "") -> Standalone:
    directory.mkdir(parents=True, exist_ok=True)
    config = secured_config(directory, extra, extra_kafka)
    return Standalone(directory / "data", extra_args=["--config", str(config)])


@contextmanager
def running(standalone: Standalone) -> Iterator[Standalone]:
    """Start it, and stop it however the block ends (a module fixture's body)."""
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()


async def login(port: int, user: str, password: str | None = None) -> WireClient:
    """A wire connection logged in as `user` with SASL PLAIN (raises if refused)."""
    client = await WireClient.connect(port)
    await sasl_plain(client, user, PASSWORDS[user] if password is None else password,
                     check=True)
    return client


async def sasl_plain(client: WireClient, user: str, password: str, *,
                     check: bool = False) -> dict[str, Any]:
    shake = await client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert shake["error_code"] == 0, shake
    answer = await client.request(
        SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    if check:
        assert answer["error_code"] == 0, answer
    return answer
