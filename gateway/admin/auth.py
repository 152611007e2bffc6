"""Who is calling the admin HTTP surface, and may they do what they ask.

One principal and one authorizer for every door (DESIGN.md): an admin request is mapped to
(principal, operation, resource) and the same ACL authorizer the Kafka listener uses decides.

Authentication, when `required` (decided by gateway/admin/listener.py from the settings):
- `Authorization: Basic` -- checked against the SCRAM credentials SASL uses
  (gateway/security/credentials.py: the stored SCRAM-SHA-512, else -256, credential's
  StoredKey); the principal is `User:<name>`.  PBKDF2 is slow on purpose, so a successful check
  is remembered for a minute, keyed by a keyed hash of (user, password, StoredKey): a changed
  or deleted credential stops matching at once, and no password is kept.
- `Authorization: Bearer lwt_...` -- an admin token (gateway/security/admin_tokens.py).
- the console's session cookie, made by logging in on /login with a user name and password
  (server-side sessions: a random id, idle and absolute expiry; every console form carries the
  session's CSRF token).  API routes never accept the cookie, so a foreign page cannot drive
  the API with the operator's browser.
When not required (a PLAINTEXT broker with no admin credentials, bound to loopback), every
request is `User:ANONYMOUS` and allowed: the behaviour before authentication existed.

Authorisation: an `Access` lists alternatives, each a list of (operation, resource type, name)
checks that must all pass; super users pass everything (the authorizer's rule).  Refusals are
401 (no or wrong credentials) or 403 (known principal, not allowed), logged as one WARNING.

This module must never log or keep a password or token, and never allow a request that no
alternative of its Access allows while authentication is required.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from protocols.kafka.acl_model import (
    OP_ALTER,
    OP_CREATE,
    OP_DELETE,
    OP_DESCRIBE,
    OP_READ,
    RES_CLUSTER,
    RES_GROUP,
    RES_TOPIC,
)
from protocols.kafka.sasl import PLAIN

log = logging.getLogger("ledgerwire.admin.auth")

CLUSTER_NAME = "kafka-cluster"  # Kafka's one CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"
SESSION_COOKIE = "lw_session"
SESSION_IDLE_S = 30 * 60
SESSION_MAX_S = 12 * 3600
MAX_SESSIONS = 1024
_VERIFIED_TTL_S = 60.0
_MAX_VERIFIED = 1024
_MAX_CREDENTIAL_BYTES = 1024


class CredentialLookup(Protocol):
    async def lookup(self, user: str, mechanism: str) -> Any: ...


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> str | None: ...


class AclAuthorizer(Protocol):
    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool: ...


Check = tuple[int, int, str]  # (operation, resource type, resource name)


@dataclass(frozen=True)
class Access:
    """Alternatives of checks: allowed when every check of some alternative passes.  `public`
    routes (health, readiness, the login page, static assets) need no principal at all."""

    alternatives: tuple[tuple[Check, ...], ...] = ()
    public: bool = False
    what: str = ""  # said in a 403 answer

    def allows(self, authorizer: AclAuthorizer, principal: str, host: str) -> bool:
        return any(all(authorizer.authorize(principal, host, op, rtype, name)
                       for op, rtype, name in alternative)
                   for alternative in self.alternatives)


PUBLIC = Access(public=True)
CLUSTER_DESCRIBE = Access(((
    (OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME),),), what="DESCRIBE on the cluster")
CLUSTER_ALTER = Access(((
    (OP_ALTER, RES_CLUSTER, CLUSTER_NAME),),), what="ALTER on the cluster")


def describe_topic(name: str) -> Access:
    return Access((((OP_DESCRIBE, RES_TOPIC, name),), ((OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"DESCRIBE on topic {name} (or on the cluster)")


def read_topic(name: str) -> Access:
    """Message contents: READ, as a Kafka Fetch needs (DESCRIBE shows only metadata)."""
    return Access((((OP_READ, RES_TOPIC, name),),), what=f"READ on topic {name}")


def create_topic(name: str) -> Access:
    return Access((((OP_CREATE, RES_TOPIC, name),), ((OP_CREATE, RES_CLUSTER, CLUSTER_NAME),),
                   ((OP_ALTER, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"CREATE on topic {name} (or CREATE/ALTER on the cluster)")


def delete_topic(name: str) -> Access:
    return Access((((OP_DELETE, RES_TOPIC, name),), ((OP_ALTER, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"DELETE on topic {name} (or ALTER on the cluster)")


def alter_topic(name: str) -> Access:
    return Access((((OP_ALTER, RES_TOPIC, name),), ((OP_ALTER, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"ALTER on topic {name} (or on the cluster)")


def describe_group(group: str) -> Access:
    return Access((((OP_DESCRIBE, RES_GROUP, group),), ((OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"DESCRIBE on group {group} (or on the cluster)")


def reset_group(group: str, topic: str) -> Access:
    """Kafka's AlterConsumerGroupOffsets rule (READ on the group and the topic), or the
    cluster's ALTER."""
    return Access((((OP_READ, RES_GROUP, group), (OP_READ, RES_TOPIC, topic)),
                   ((OP_ALTER, RES_CLUSTER, CLUSTER_NAME),)),
                  what=f"READ on group {group} and topic {topic} (or ALTER on the cluster)")


@dataclass(frozen=True)
class Identity:
    principal: str
    method: str  # basic | bearer | session | anonymous
    session: Session | None = None


class Refused(Exception):
    """An admin request refused: 401 (who are you?) or 403 (not you)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Session:
    session_id: str
    principal: str
    csrf: str
    created: float
    last_seen: float
    method: str = "session"


@dataclass
class SessionTable:
    """Console logins: random ids -> principal, bounded, expiring (process memory only)."""

    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)

    def create(self, principal: str) -> Session:
        now = time.monotonic()
        session = Session(secrets.token_urlsafe(32), principal, secrets.token_urlsafe(24),
                          now, now)
        self.sessions[session.session_id] = session
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)  # the oldest login goes first
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 100:
            return None
        session = self.sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > SESSION_IDLE_S or now - session.created > SESSION_MAX_S:
            del self.sessions[session_id]
            return None
        session.last_seen = now
        return session

    def drop(self, session_id: str | None) -> None:
        if session_id:
            self.sessions.pop(session_id, None)


def parse_basic(value: str) -> tuple[str, str] | None:
    """(user, password) of a Basic credential, or None when malformed."""
    try:
        raw = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    user, sep, password = raw.partition(":")
    if not sep or not user:
        return None
    return user, password


class AdminAuth:
    """Authenticates admin requests and checks their Access (see the module doc)."""

    def __init__(self, *, required: bool, credentials: CredentialLookup | None = None,
                 tokens: TokenVerifier | None = None, authorizer: AclAuthorizer | None = None,
                 metrics_public: bool = False, failed_delay_s: float = 0.0) -> None:
        if required and authorizer is None:
            raise ValueError("authentication without an authorizer")
        self.required = required
        self.credentials = credentials
        self.tokens = tokens
        self.authorizer = authorizer
        self.metrics_public = metrics_public or not required
        # a wrong password or token is answered this much later (the Kafka listener's
        # connection.failed.authentication.delay.ms): guessing costs the guesser time
        self.failed_delay_s = failed_delay_s
        self.sessions = SessionTable()
        self._hash_key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, float] = OrderedDict()

    # --- authentication ---------------------------------------------------------------------

    async def check_password(self, user: str, password: str) -> bool:
        if self.credentials is None or len(user) + len(password) > _MAX_CREDENTIAL_BYTES:
            return False
        credential = await self.credentials.lookup(user, PLAIN)
        if credential is None:
            return False
        key = hmac.new(self._hash_key, b"\0".join((
            user.encode(), password.encode(), bytes(credential.stored_key))),
            hashlib.sha256).digest()
        now = time.monotonic()
        seen = self._verified.get(key)
        if seen is not None and now - seen < _VERIFIED_TTL_S:
            return True
        ok = bool(await trio.to_thread.run_sync(credential.check_password, password))
        if ok:
            self._verified[key] = now
            while len(self._verified) > _MAX_VERIFIED:
                self._verified.popitem(last=False)
        return ok

    async def from_headers(self, headers: Mapping[str, str]) -> Identity | None:
        """The identity an Authorization header proves; None when there is none; Refused(401)
        when it is malformed or wrong."""
        value = headers.get("authorization")
        if not value:
            return None
        scheme, _, rest = value.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            pair = parse_basic(rest)
            if pair is None:
                raise Refused(401, "malformed Basic credentials")
            if not await self.check_password(*pair):
                await trio.sleep(self.failed_delay_s)
                raise Refused(401, "wrong user name or password")
            return Identity(f"User:{pair[0]}", "basic")
        if scheme == "bearer":
            principal = await self.tokens.verify(rest.strip()) if self.tokens else None
            if principal is None:
                await trio.sleep(self.failed_delay_s)
                raise Refused(401, "unknown, expired or revoked token")
            return Identity(principal, "bearer")
        raise Refused(401, f"unsupported authorization scheme {scheme[:20]!r}")

    async def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str], *,
                       allow_session: bool) -> Identity | None:
        """Who this is: headers first, then (console only) the session cookie."""
        identity = await self.from_headers(headers)
        if identity is not None:
            return identity
        if allow_session:
            session = self.sessions.get(cookies.get(SESSION_COOKIE))
            if session is not None:
                return Identity(session.principal, "session", session)
        if not self.required:
            return Identity(ANONYMOUS, "anonymous")
        return None

    # --- authorisation ------------------------------------------------------------------------

    def allowed(self, identity: Identity, host: str, access: Access) -> bool:
        if access.public or not self.required:
            return True
        assert self.authorizer is not None
        return access.allows(self.authorizer, identity.principal, host)

    def check(self, identity: Identity | None, host: str, access: Access) -> Identity | None:
        """Raise Refused unless `identity` may pass `access`; returns the identity."""
        if access.public or not self.required:
            return identity
        if identity is None:
            raise Refused(401, "authentication required (HTTP Basic with a SASL/SCRAM user, "
                               "or Bearer with an admin token)")
        if not self.allowed(identity, host, access):
            raise Refused(403, f"{identity.principal} may not do this: it needs {access.what}")
        return identity

    def visible(self, identity: Identity, host: str, names: Iterable[str],
                access_of: Any) -> list[str]:
        """The names whose Access (`access_of(name)`) `identity` passes (lists are filtered,
        as Kafka's Metadata is, rather than refused)."""
        return [n for n in names if self.allowed(identity, host, access_of(n))]


def log_refusal(status: int, message: str, method: str, path: str, client: str,
                principal: str | None) -> None:
    log.warning("admin request refused: %s %s -> %d (%s)", method, path[:200], status, message,
                extra={"client": client, "principal": principal or "-"})

