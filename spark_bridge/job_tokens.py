"""Delegation tokens for a Spark job's executors (KIP-48): the driver logs in to the brokers as
the job's principal (with its password), asks for a token with a short max lifetime, and the
executors' Kafka producers log in with the token (SCRAM, user name = token id, password = the
base64 HMAC) instead of the password; the driver expires the token when the job ends.  A token
authenticates as its owner, so the brokers apply the principal's own ACLs to every produce.

confluent-kafka has no delegation token API, so this module speaks the four Kafka requests
itself, over one blocking socket (TLS for SASL_SSL), with the project's codec and SASL client
(protocols/kafka).  Errors: AuthorizationError when the brokers refuse the login or the token
(DELEGATION_TOKEN_AUTH_DISABLED: the brokers have no token secret key), RuntimeError when no
broker answers.

This module must never log or put a password or an HMAC into a message, and never keep the
principal's password in what it returns.
"""

from __future__ import annotations

import base64
import logging
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocols.kafka.codec import RequestHeader, decode_response, encode_request
from protocols.kafka.errors import ErrorCode
from protocols.kafka.sasl_client import SaslClient
from spark_bridge.authorization import AuthorizationError, ReadPrincipal

log = logging.getLogger("spark_bridge.job_tokens")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
CREATE, EXPIRE = 38, 40
TOKEN_MECHANISM = "SCRAM-SHA-512"
DEFAULT_MAX_LIFETIME_MS = 2 * 3600 * 1000
# the backfill writer's options (writer.py)
EXECUTOR_CREDENTIALS_OPTION = "ledgerwire.executorCredentials"  # token (default) | password
DELEGATION_TOKEN_OPTION = "ledgerwire.delegationToken"  # "true": kafka.sasl.* name a token
TOKEN_LIFETIME_OPTION = "ledgerwire.tokenMaxLifetimeMs"
_MAX_FRAME = 1 << 20


@dataclass(frozen=True)
class JobToken:
    """A delegation token: what the executors get (id and HMAC), nothing else."""

    token_id: str
    hmac: bytes = field(repr=False)
    owner: str
    expiry_ms: int
    max_ms: int

    @property
    def password(self) -> str:
        """The SCRAM password of a token login: the HMAC in base64, as Kafka's clients send it."""
        return base64.b64encode(self.hmac).decode("ascii")


def token_client_config(config: Mapping[str, Any], token: JobToken,
                        mechanism: str = TOKEN_MECHANISM) -> dict[str, Any]:
    """librdkafka settings that log in with `token` instead of the principal's password."""
    out = {k: v for k, v in config.items()
           if k.lower() not in ("sasl.password", "sasl.jaas.config", "sasl.username")}
    out.update({"sasl.mechanism": mechanism, "sasl.username": token.token_id,
                "sasl.password": token.password})
    return out


class _Connection:
    """One logged-in Kafka connection (blocking; closed by `close`)."""

    def __init__(self, principal: ReadPrincipal, timeout_s: float) -> None:
        config = dict(principal.client_config)
        self.who = f"User:{principal.user}"
        self._correlation = 0
        errors = []
        for address in str(config["bootstrap.servers"]).split(","):
            host, _, port = address.strip().rpartition(":")
            try:
                raw = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
            except (OSError, ValueError) as exc:
                errors.append(f"{address.strip()}: {exc}")
                continue
            try:
                self.sock = self._wrap(raw, host.strip("[]"), config)
            except (OSError, ssl.SSLError) as exc:
                raw.close()
                errors.append(f"{address.strip()}: {exc}")
                continue
            break
        else:
            raise RuntimeError(f"cannot reach the brokers for a delegation token of {self.who}: "
                               + "; ".join(errors))
        try:
            self._login(config)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _wrap(raw: socket.socket, host: str, config: Mapping[str, Any]) -> socket.socket:
        if str(config.get("security.protocol", "")).upper() != "SASL_SSL":
            return raw
        context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
        if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            context.check_hostname = False
        if config.get("ssl.certificate.location"):
            context.load_cert_chain(config["ssl.certificate.location"],
                                    config.get("ssl.key.location") or None)
        return context.wrap_socket(raw, server_hostname=host)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._correlation += 1
        header = RequestHeader(api_key, version, self._correlation, "ledgerwire-spark")
        self.sock.sendall(encode_request(header, body))
        (size,) = struct.unpack(">i", self._read(4))
        if not 0 < size <= _MAX_FRAME:
            raise RuntimeError(f"the broker answered a frame of {size} bytes")
        correlation, answer = decode_response(api_key, version, self._read(size))
        if correlation != self._correlation:
            raise RuntimeError("the broker answered out of order")
        return answer

    def _read(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise RuntimeError("the broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def _login(self, config: Mapping[str, Any]) -> None:
        mechanism = str(config.get("sasl.mechanism", "PLAIN")).upper()
        client = SaslClient(mechanism, str(config["sasl.username"]),
                            str(config.get("sasl.password", "")))
        shake = self.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if shake["error_code"]:
            raise AuthorizationError(f"the brokers refused the login of {self.who}: "
                                     f"{ErrorCode(shake['error_code']).name}")
        token = client.first_token()
        while True:
            answer = self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if answer["error_code"]:
                raise AuthorizationError(f"the brokers refused the login of {self.who}: "
                                         f"{answer.get('error_message') or answer['error_code']}")
            if mechanism == "PLAIN" or client.awaiting_server_final:
                client.finish(answer["auth_bytes"])
                return
            token = client.next_token(answer["auth_bytes"])

    def close(self) -> None:
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()


def _refusal(code: int, who: str, what: str) -> AuthorizationError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    if code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED:
        return AuthorizationError(
            f"the brokers issue no delegation tokens (DELEGATION_TOKEN_AUTH_DISABLED: set "
            f"[security] delegation_token_secret_key on every broker), so the executors of "
            f"{who} would need the password; set ledgerwire.executorCredentials=password to "
            f"send it to them anyway")
    return AuthorizationError(f"the brokers refused to {what} a delegation token of {who}: {name}")


def create_job_token(principal: ReadPrincipal, max_lifetime_ms: int = DEFAULT_MAX_LIFETIME_MS,
                     timeout_s: float = 30.0) -> JobToken:
    """A new token owned by `principal` that lives at most `max_lifetime_ms` (see the module
    docstring for the errors)."""
    try:
        connection = _Connection(principal, timeout_s)
        try:
            answer = connection.request(CREATE, 2, {"renewers": [],
                                                    "max_lifetime_ms": int(max_lifetime_ms)})
        finally:
            connection.close()
    except OSError as exc:
        raise RuntimeError(f"the brokers did not answer the delegation token request of "
                           f"User:{principal.user}: {exc}") from None
    if answer["error_code"]:
        raise _refusal(answer["error_code"], connection.who, "create")
    token = JobToken(answer["token_id"], bytes(answer["hmac"]),
                     f"{answer['principal_type']}:{answer['principal_name']}",
                     answer["expiry_timestamp_ms"], answer["max_timestamp_ms"])
    log.info("delegation token %s created for the executors of %s (expires %d)",
             token.token_id, connection.who, token.expiry_ms)
    return token


def expire_job_token(principal: ReadPrincipal, token: JobToken, timeout_s: float = 30.0) -> bool:
    """Expire `token` now (the job ended); False, with one WARNING, if that failed (the token
    then lives until its max lifetime)."""
    try:
        connection = _Connection(principal, timeout_s)
        try:
            answer = connection.request(EXPIRE, 2, {"hmac": token.hmac,
                                                    "expiry_time_period_ms": -1})
        finally:
            connection.close()
    except (OSError, RuntimeError, AuthorizationError) as exc:
        log.warning("could not expire delegation token %s: %s", token.token_id, exc)
        return False
    if answer["error_code"] not in (ErrorCode.NONE, ErrorCode.DELEGATION_TOKEN_NOT_FOUND,
                                    ErrorCode.DELEGATION_TOKEN_EXPIRED):
        log.warning("could not expire delegation token %s: %s", token.token_id,
                    answer["error_code"])
        return False
    return True


__all__ = ["DEFAULT_MAX_LIFETIME_MS", "DELEGATION_TOKEN_OPTION", "EXECUTOR_CREDENTIALS_OPTION",
           "TOKEN_LIFETIME_OPTION", "JobToken", "create_job_token", "expire_job_token",
           "token_client_config"]
