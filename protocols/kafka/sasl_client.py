"""The client side of SASL PLAIN and SCRAM-SHA-256/512 for a Kafka connection, sans-IO.

What a broker needs to log in to another broker (gateway/cluster/peer_client.py): `SaslClient` takes
the server's tokens and gives back the next client token, without touching a socket.

    PLAIN:  first_token() = "" NUL user NUL password; done after the server accepts it.
    SCRAM:  first_token() = client-first-message "n,,n=<user>,r=<nonce>[,key=value]*" (SCRAM
            extensions, e.g. tokenauth=true for a Kafka delegation token);
            next_token(server-first) = client-final-message "c=biws,r=<nonce>,p=<proof>";
            finish(server-final) checks the server's signature "v=..." (RFC 5802 section 3),
            so a broker is never fooled by an impostor that does not know the credential.

The salted password (PBKDF2, slow on purpose) is computed in `next_token`; callers on an event
loop run that step in a worker thread.  This module must never log or keep a password longer
than the exchange, and must never accept a server-first-message whose nonce does not extend
its own or whose iteration count is below the RFC 7677 minimum.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from protocols.kafka.errors import SaslAuthenticationFailedError
from protocols.kafka.sasl import MIN_ITERATIONS, PLAIN, SCRAM_HASHES

CLIENT_MECHANISMS = (PLAIN, *SCRAM_HASHES)


def _escape_name(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslAuthenticationFailedError(f"malformed SCRAM attribute from the server: "
                                                f"{key!r}")
        out.setdefault(key, value)
    return out


class SaslClient:
    """One login's client side (see the module docstring)."""

    def __init__(self, mechanism: str, user: str, password: str,
                 nonce: str | None = None, extensions: dict[str, str] | None = None) -> None:
        if mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        if not user:
            raise ValueError("empty SASL user name")
        self.mechanism = mechanism
        self.user = user
        self._password: str | None = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_escape_name(user)},r={self._nonce}" + "".join(
            f",{key}={value}" for key, value in (extensions or {}).items())
        self._expected_server_signature: bytes | None = None
        self.done = False

    @property
    def awaiting_server_final(self) -> bool:
        """SCRAM: the client-final-message went out; the next server token ends the login."""
        return self._expected_server_signature is not None

    def first_token(self) -> bytes:
        if self.mechanism == PLAIN:
            password = self._password or ""
            self._password = None
            return b"\0" + self.user.encode("utf-8") + b"\0" + password.encode("utf-8")
        return ("n,," + self._client_first_bare).encode("utf-8")

    def next_token(self, server_first: bytes) -> bytes:
        """SCRAM only: the client-final-message answering the server-first-message."""
        if self.mechanism == PLAIN or self._password is None:
            raise SaslAuthenticationFailedError("unexpected SASL challenge from the server")
        try:
            text = bytes(server_first).decode("utf-8")
        except UnicodeError:
            raise SaslAuthenticationFailedError("server-first-message is not UTF-8") from None
        if text.startswith("e="):
            raise SaslAuthenticationFailedError(f"server refused the login: {text[2:]}")
        attrs = _attributes(text)
        nonce, salt_b64, iterations_text = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslAuthenticationFailedError("SCRAM server nonce does not extend ours")
        try:
            salt = base64.b64decode(salt_b64 or "", validate=True)
            iterations = int(iterations_text or "")
        except ValueError:
            raise SaslAuthenticationFailedError("malformed SCRAM salt or iterations") from None
        if iterations < MIN_ITERATIONS or not salt:
            raise SaslAuthenticationFailedError(f"SCRAM iterations {iterations} below "
                                                f"{MIN_ITERATIONS} or empty salt")
        name = SCRAM_HASHES[self.mechanism]
        salted = hashlib.pbkdf2_hmac(name, self._password.encode("utf-8"), salt, iterations)
        self._password = None
        client_key = hmac.new(salted, b"Client Key", name).digest()
        stored_key = hashlib.new(name, client_key).digest()
        server_key = hmac.new(salted, b"Server Key", name).digest()
        without_proof = f"c=biws,r={nonce}"  # base64("n,,"): no channel binding, no authzid
        auth_message = ",".join((self._client_first_bare, text, without_proof)).encode("utf-8")
        client_signature = hmac.new(stored_key, auth_message, name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._expected_server_signature = hmac.new(server_key, auth_message, name).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def finish(self, server_final: bytes) -> None:
        """The server accepted the last token: for SCRAM, check it proved the credential."""
        if self.mechanism == PLAIN:
            self.done = True
            return
        expected = self._expected_server_signature
        if expected is None:
            raise SaslAuthenticationFailedError("SCRAM exchange ended early")
        try:
            attrs = _attributes(bytes(server_final).decode("utf-8"))
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except (UnicodeError, ValueError):
            raise SaslAuthenticationFailedError("malformed server-final-message") from None
        if not hmac.compare_digest(signature, expected):
            raise SaslAuthenticationFailedError("the server's SCRAM signature is wrong: it "
                                                "does not know this user's credential")
        self.done = True
