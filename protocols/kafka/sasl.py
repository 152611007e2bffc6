"""SASL authentication of one Kafka connection: PLAIN and SCRAM-SHA-256/512, sans-IO.

`SaslSession` is the per-connection state machine.  Its transition table (`_TRANSITIONS`) is
the whole truth of which request may come when:

    AWAIT_HANDSHAKE --SaslHandshake(known mechanism)--> AWAIT_TOKEN
    AWAIT_TOKEN     --SaslAuthenticate(PLAIN ok)------> AUTHENTICATED
    AWAIT_TOKEN     --SaslAuthenticate(SCRAM first)---> AWAIT_SCRAM_FINAL
    AWAIT_SCRAM_FINAL --SaslAuthenticate(proof ok)----> AUTHENTICATED
    AUTHENTICATED   --SaslHandshake v1+ (re-authentication, KIP-368, when the session has
                      a lifetime)----------------------> AWAIT_TOKEN
    any failure ------------------------------------> FAILED (the connection is closed)

Re-authentication (Kafka's connections.max.reauth.ms) keeps the principal while it runs and
must end with the same one; a session past `expires_at` may only re-authenticate (the
listener closes a connection that sends anything else).

ApiVersions is allowed before the handshake (clients ask it first); any other request before
AUTHENTICATED, a second handshake, or any input in FAILED is refused (`allows` is False) and
the listener closes the connection.  SaslHandshake v0 means the tokens that follow come as raw
size-prefixed frames instead of SaslAuthenticate requests (`raw_tokens`).

SCRAM follows RFC 5802 / RFC 7677: the server stores only (salt, iterations, StoredKey,
ServerKey) -- `ScramCredential`, made by `make_credential` -- and checks the client's proof
against StoredKey; channel binding is not supported ("n" or "y" GS2 flags only).  PLAIN checks
the password by deriving StoredKey from it with the user's stored SCRAM salt and iterations,
so no password is ever stored.  Credentials are looked up by the caller between
`username_in(token)` and `authenticate(token, credential)`; this module does no I/O.

Delegation tokens (KIP-48) log in with SCRAM: the user name is the token id, the password the
token's base64 HMAC, and Kafka's Java clients add the SCRAM extension `tokenauth=true` to the
client-first message (`token_auth_in`; extensions are `key=value` pairs after the nonce, keys of
letters and digits as Kafka's ScramExtensions allow).  The caller then passes the token's
credential and its owner as `principal`: the connection's principal is the owner, and
`token_authenticated` is set (such a connection may not ask for tokens itself).

This module must never store or log a password, or compare secrets other than in constant time.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from protocols.kafka.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
ALL_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism maxIterations
DEFAULT_ITERATIONS = 4096


class SaslState(enum.Enum):
    AWAIT_HANDSHAKE = "await-handshake"
    AWAIT_TOKEN = "await-token"
    AWAIT_SCRAM_FINAL = "await-scram-final"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


# state -> API keys a client may send in it
_TRANSITIONS: dict[SaslState, frozenset[int]] = {
    SaslState.AWAIT_HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    SaslState.AWAIT_TOKEN: frozenset({SASL_AUTHENTICATE}),
    SaslState.AWAIT_SCRAM_FINAL: frozenset({SASL_AUTHENTICATE}),
    SaslState.AUTHENTICATED: frozenset(),  # everything except the SASL APIs, see allows()
    SaslState.FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        return {"mechanism": self.mechanism, "salt": _b64(self.salt),
                "iterations": self.iterations, "stored_key": _b64(self.stored_key),
                "server_key": _b64(self.server_key)}

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> ScramCredential:
        return cls(str(doc["mechanism"]), base64.b64decode(str(doc["salt"])),
                   int(doc["iterations"]),  # type: ignore[call-overload]
                   base64.b64decode(str(doc["stored_key"])),
                   base64.b64decode(str(doc["server_key"])))

    def check_password(self, password: str) -> bool:
        """Does `password` produce this credential's StoredKey? (PBKDF2: slow on purpose.)"""
        stored_key, _server_key = _derive_keys(self.mechanism, password, self.salt,
                                               self.iterations)
        return hmac.compare_digest(stored_key, self.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _derive_keys(
    mechanism: str, password: str, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    name = SCRAM_HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    return _keys_of_salted(name, salted)


def _keys_of_salted(name: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a SaltedPassword (RFC 5802 section 3)."""
    client_key = hmac.new(salted, b"Client Key", name).digest()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return hashlib.new(name, client_key).digest(), server_key


def credential_from_salted(mechanism: str, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    """The stored form of a credential whose SaltedPassword a client computed (Kafka's
    AlterUserScramCredentials sends salt and SaltedPassword, never the password)."""
    if mechanism not in SCRAM_HASHES:
        raise ValueError(f"not a SCRAM mechanism: {mechanism}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    if not salt or not salted_password:
        raise ValueError("empty salt or salted password")
    stored_key, server_key = _keys_of_salted(SCRAM_HASHES[mechanism], salted_password)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """The stored form of a SCRAM password (RFC 5802 section 3)."""
    if mechanism not in SCRAM_HASHES:
        raise ValueError(f"not a SCRAM mechanism: {mechanism}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    stored_key, server_key = _derive_keys(mechanism, password, salt, iterations)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def _failed(mechanism: str | None) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def _scram_name(raw: str) -> str:
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise ValueError("bad escape in SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


def _client_first_bare(bare: str) -> tuple[str, str, dict[str, str]]:
    """(raw user name, nonce, extensions) of a client-first-message-bare
    (`n=user,r=nonce[,key=value]*`; RFC 5802 section 7 with Kafka's extension keys)."""
    parts = bare.split(",")
    if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
        raise ValueError("client-first-message needs n= and r=")
    extensions: dict[str, str] = {}
    for part in parts[2:]:
        key, sep, value = part.partition("=")
        if not sep or not key.isascii() or not key.isalnum():
            raise ValueError(f"malformed SCRAM extension {part!r}")
        extensions[key] = value
    return parts[0][2:], parts[1][2:], extensions


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ValueError(f"malformed SCRAM attribute {part!r}")
        out.append((key, value))
    return out


class SaslSession:
    """One connection's authentication (see the module docstring for the table)."""

    def __init__(self, mechanisms: tuple[str, ...] = ALL_MECHANISMS) -> None:
        self.enabled_mechanisms = mechanisms
        self.state = SaslState.AWAIT_HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens come as raw frames
        # logged in with a delegation token (the principal is then the token's owner)
        self.token_authenticated = False
        self._credential: ScramCredential | None = None
        self._user = ""
        self._login_principal: str | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        # KIP-368: when the login ends (monotonic seconds; None: never) and whether the
        # session may re-authenticate; set by whoever answers SaslAuthenticate.
        self.expires_at: float | None = None
        self.reauthenticating = False

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def failed(self) -> bool:
        return self.state is SaslState.FAILED

    def allows(self, api_key: int) -> bool:
        """May a request of `api_key` be served now?  False means: close the connection."""
        if self.state is SaslState.AUTHENTICATED:
            if api_key == SASL_HANDSHAKE:  # re-authentication, only for a session with an end
                return self.expires_at is not None
            return api_key != SASL_AUTHENTICATE
        return api_key in _TRANSITIONS[self.state]

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def _require(self, api_key: int) -> None:
        if not self.allows(api_key):
            state = self.state
            self.state = SaslState.FAILED
            raise IllegalSaslStateError(f"unexpected request {api_key} in SASL state {state.value}")

    def handshake(self, mechanism: str, version: int) -> None:
        self._require(SASL_HANDSHAKE)
        if self.state is SaslState.AUTHENTICATED:
            if version == 0:  # raw tokens cannot follow requests on a live connection
                self.state = SaslState.FAILED
                raise IllegalSaslStateError("re-authentication needs SaslHandshake v1+")
            self.reauthenticating = True
        if mechanism not in self.enabled_mechanisms:
            self.state = SaslState.FAILED
            raise UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism}; enabled: "
                f"{', '.join(self.enabled_mechanisms)}"
            )
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = SaslState.AWAIT_TOKEN

    def username_in(self, token: bytes) -> str | None:
        """The user whose credential `authenticate(token, ...)` needs, or None (none needed)."""
        self._require(SASL_AUTHENTICATE)
        if self.state is SaslState.AWAIT_SCRAM_FINAL:
            return None
        try:
            if self.mechanism == PLAIN:
                parts = bytes(token).split(b"\0")
                return parts[1].decode("utf-8") if len(parts) == 3 else None
            text = bytes(token).decode("utf-8")
            gs2_flag, _, rest = text.partition(",")
            _authzid, _, bare = rest.partition(",")
            if gs2_flag not in ("n", "y"):
                return None
            return _scram_name(_client_first_bare(bare)[0])
        except (UnicodeError, ValueError):
            return None

    def token_auth_in(self, token: bytes) -> bool:
        """Does this SCRAM client-first message ask to log in with a delegation token
        (extension tokenauth=true)?  False for anything else, malformed input included."""
        if self.mechanism not in SCRAM_HASHES or self.state is not SaslState.AWAIT_TOKEN:
            return False
        try:
            _gs2, _, rest = bytes(token).decode("utf-8").partition(",")
            _authzid, _, bare = rest.partition(",")
            return _client_first_bare(bare)[2].get("tokenauth", "").lower() == "true"
        except (UnicodeError, ValueError):
            return False

    def authenticate(self, token: bytes, credential: ScramCredential | None,
                     principal: str | None = None) -> bytes:
        """Take one client token; the server's answer token.  SaslAuthenticationFailedError
        (state FAILED) when the client is not who it claims to be or breaks the exchange.
        `principal` (SCRAM first message only): the delegation token's owner whose
        credential this is; the login then has that principal and is token-authenticated."""
        self._require(SASL_AUTHENTICATE)
        try:
            if self.mechanism == PLAIN:
                return self._plain(bytes(token), credential)
            if self.state is SaslState.AWAIT_TOKEN:
                return self._scram_first(bytes(token), credential, principal)
            return self._scram_final(bytes(token))
        except SaslAuthenticationFailedError:
            self.state = SaslState.FAILED
            raise
        except (UnicodeError, ValueError, IndexError, KeyError) as exc:
            self.state = SaslState.FAILED
            raise SaslAuthenticationFailedError(
                f"Malformed SASL {self.mechanism} token: {exc}") from None

    def _plain(self, token: bytes, credential: ScramCredential | None) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise ValueError("PLAIN token must be authzid NUL authcid NUL password")
        authzid, user, password = (p.decode("utf-8") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationFailedError("Authentication failed: authorization id "
                                                "must be empty or the user name")
        if credential is None or not credential.check_password(password):
            raise _failed(self.mechanism)
        self._succeed(user)
        return b""

    def _scram_first(self, token: bytes, credential: ScramCredential | None,
                     principal: str | None) -> bytes:
        text = token.decode("utf-8")
        gs2_flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag not in ("n", "y"):
            raise ValueError("channel binding is not supported")
        raw_user, client_nonce, _extensions = _client_first_bare(bare)
        if not client_nonce:
            raise ValueError("client-first-message needs a nonce")
        user = _scram_name(raw_user)
        if authzid and authzid != f"a={raw_user}":
            raise SaslAuthenticationFailedError("Authentication failed: authorization id "
                                                "must be empty or the user name")
        if credential is None or credential.mechanism != self.mechanism:
            raise _failed(self.mechanism)
        self._credential = credential
        if not self.reauthenticating:
            self.principal = None
        self._user = user
        self._login_principal = principal
        self._gs2_header = f"{gs2_flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={_b64(credential.salt)},"
                              f"i={credential.iterations}")
        self.state = SaslState.AWAIT_SCRAM_FINAL
        return self._server_first.encode("utf-8")

    def _scram_final(self, token: bytes) -> bytes:
        credential = self._credential
        assert credential is not None  # set in _scram_first, the only way into this state
        text = token.decode("utf-8")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ValueError("client-final-message has no proof")
        attrs = dict(_attributes(without_proof))
        if base64.b64decode(attrs["c"]) != self._gs2_header.encode("utf-8"):
            raise SaslAuthenticationFailedError("SCRAM channel binding data do not match")
        if not hmac.compare_digest(attrs["r"], self._nonce):
            raise SaslAuthenticationFailedError("SCRAM nonce does not match")
        auth_message = ",".join((self._client_first_bare, self._server_first, without_proof))
        name = SCRAM_HASHES[credential.mechanism]
        client_signature = hmac.new(credential.stored_key, auth_message.encode("utf-8"),
                                    name).digest()
        proof = base64.b64decode(proof_part)
        if len(proof) != len(client_signature):
            raise _failed(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(name, client_key).digest(),
                                   credential.stored_key):
            raise _failed(self.mechanism)
        server_signature = hmac.new(credential.server_key, auth_message.encode("utf-8"),
                                    name).digest()
        self._succeed(self._user)
        return f"v={_b64(server_signature)}".encode()

    def _succeed(self, user: str) -> None:
        principal = self._login_principal or f"User:{user}"
        if self.reauthenticating and self.principal != principal:
            raise SaslAuthenticationFailedError(
                f"re-authentication as {principal} on a connection of {self.principal}")
        self.principal = principal
        self.token_authenticated = self._login_principal is not None
        self.state = SaslState.AUTHENTICATED
        self.reauthenticating = False
        self._credential = None
        self._login_principal = None
