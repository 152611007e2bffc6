"""Kafka delegation tokens (KIP-48) kept in the metadata store.

A token is an id (22 url-safe base64 characters, as Kafka's) and an HMAC: HMAC-SHA512 of the
id under the cluster's secret key (`[security] delegation_token_secret_key`, Kafka's
`delegation.token.secret.key`).  The HMAC is never stored: every broker with the same key
computes it, so the store holds only what is not secret -- one node per token,
/ledgerwire/delegation_tokens/<id>, JSON {"format": 1, owner, requester, renewers,
issue_ms, expiry_ms, max_ms}.  Every broker reads the store at each use (a login, a renewal),
so a token created on one broker of a cluster works on every other at once, and an expired or
deleted one stops everywhere at once.  Changes are compare-and-set on the node's version.

A client logs in with SCRAM using the token id as user name and the base64 HMAC as password
(`scram_credential`); the login's principal is the token's owner.  An expired token is refused
and its node deleted when it is met (`get`, `live_tokens`) and by `purge`, which the broker runs
periodically.

This module must never log or store an HMAC or the secret key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NoNodeError,
)
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.sasl import MIN_ITERATIONS, ScramCredential, make_credential

log = logging.getLogger("ledgerwire.delegation_tokens")

TOKENS_PATH = "/ledgerwire/delegation_tokens"
TOKEN_FORMAT_VERSION = 1
DEFAULT_MAX_LIFETIME_MS = 7 * 24 * 3600 * 1000  # Kafka's delegation.token.max.lifetime.ms
DEFAULT_RENEW_MS = 24 * 3600 * 1000  # Kafka's delegation.token.expiry.time.ms
MIN_SECRET_BYTES = 16
_CREDENTIAL_CACHE_SIZE = 256


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    owner: str  # "User:alice"
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int
    version: int = field(default=-1, compare=False)

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expiry_ms or now_ms >= self.max_ms

    def may_renew(self, principal: str) -> bool:
        """Owner, requester or a named renewer (Kafka's allowedToRenew)."""
        return principal in (self.owner, self.requester) or principal in self.renewers

    def to_json(self) -> bytes:
        return json.dumps({"format": TOKEN_FORMAT_VERSION, "token_id": self.token_id,
                           "owner": self.owner, "requester": self.requester,
                           "renewers": list(self.renewers), "issue_ms": self.issue_ms,
                           "expiry_ms": self.expiry_ms, "max_ms": self.max_ms},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int) -> TokenInfo:
        doc = json.loads(data)
        if doc.get("format") != TOKEN_FORMAT_VERSION:
            raise ValueError(f"delegation token node: unknown format {doc.get('format')}")
        return cls(str(doc["token_id"]), str(doc["owner"]), str(doc["requester"]),
                   tuple(str(r) for r in doc.get("renewers", ())), int(doc["issue_ms"]),
                   int(doc["expiry_ms"]), int(doc["max_ms"]), version)


def new_token_id() -> str:
    """22 url-safe base64 characters of a random UUID (Kafka's generateUuidAsBase64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _path(token_id: str) -> str:
    if not token_id or "/" in token_id or token_id in (".", ".."):
        raise ValueError("bad token id")
    return f"{TOKENS_PATH}/{token_id}"


class DelegationTokenStore:
    """Create, renew, expire, describe and check tokens (see the module docstring)."""

    def __init__(self, store: MetadataStore, secret_key: str, *,
                 max_lifetime_ms: int = DEFAULT_MAX_LIFETIME_MS,
                 renew_ms: int = DEFAULT_RENEW_MS,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        if len(secret_key.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"the delegation token secret key needs at least "
                             f"{MIN_SECRET_BYTES} bytes")
        self._store = store
        self._key = secret_key.encode()
        self.max_lifetime_ms = max_lifetime_ms
        self.renew_ms = renew_ms
        self._now = clock_ms
        # (token id, mechanism) -> credential; the salt is ours, so one PBKDF2 per token
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def hmac_of(self, token_id: str) -> bytes:
        return hmac.new(self._key, token_id.encode(), hashlib.sha512).digest()

    def now_ms(self) -> int:
        return self._now()

    async def _read(self, token_id: str) -> TokenInfo | None:
        try:
            data, stat = await self._store.get(_path(token_id))
        except (NoNodeError, ValueError):
            return None
        try:
            return TokenInfo.from_json(data, stat.version)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable delegation token node %s: %s", token_id, exc)
            return None

    async def _delete(self, info: TokenInfo) -> None:
        try:
            await self._store.delete(_path(info.token_id), info.version)
        except (NoNodeError, BadVersionError):
            pass  # another broker renewed or purged it meanwhile
        self._forget(info.token_id)
        log.info("delegation token removed", extra={"token_id": info.token_id,
                                                    "owner": info.owner})

    def _forget(self, token_id: str) -> None:
        for key in [k for k in self._credentials if k[0] == token_id]:
            del self._credentials[key]

    async def get(self, token_id: str) -> TokenInfo | None:
        """The live token of that id; an expired one is deleted and None."""
        info = await self._read(token_id)
        if info is not None and info.expired(self._now()):
            await self._delete(info)
            return None
        return info

    async def live_tokens(self) -> list[TokenInfo]:
        """Every live token (expired ones are purged on the way)."""
        now = self._now()
        out = []
        for info in await self._all():
            if info.expired(now):
                await self._delete(info)
            else:
                out.append(info)
        return out

    async def purge(self) -> int:
        """Delete every expired token; how many were deleted."""
        now = self._now()
        doomed = [info for info in await self._all() if info.expired(now)]
        for info in doomed:
            await self._delete(info)
        return len(doomed)

    async def _all(self) -> list[TokenInfo]:
        """Every token node, expired or not."""
        try:
            names = await self._store.children(TOKENS_PATH)
        except NoNodeError:
            return []
        found = [await self._read(name) for name in sorted(names)]
        return [info for info in found if info is not None]

    async def by_hmac(self, token_hmac: bytes) -> TokenInfo | None:
        """The token (expired or not) whose HMAC this is (Renew/Expire name tokens by HMAC)."""
        for info in await self._all():
            if hmac.compare_digest(self.hmac_of(info.token_id), bytes(token_hmac)):
                return info
        return None

    async def create(self, owner: str, requester: str, renewers: tuple[str, ...],
                     max_lifetime_ms: int) -> TokenInfo:
        """A new token: its max lifetime is the asked one (<= 0: the server's), capped by the
        server's; it expires after the renew period unless renewed."""
        now = self._now()
        lifetime = (self.max_lifetime_ms if max_lifetime_ms <= 0
                    else min(max_lifetime_ms, self.max_lifetime_ms))
        max_ms = now + lifetime
        info = TokenInfo(new_token_id(), owner, requester, renewers, now,
                         min(now + self.renew_ms, max_ms), max_ms)
        await self._store.create(_path(info.token_id), info.to_json(), make_parents=True)
        log.info("delegation token created", extra={
            "token_id": info.token_id, "owner": owner, "requester": requester,
            "max_ms": max_ms})
        return info

    async def _update(self, token_hmac: bytes, principal: str,
                      change: Callable[[TokenInfo, int], TokenInfo | None]) -> int:
        for _ in range(20):
            info = await self.by_hmac(token_hmac)
            if info is None:
                raise KafkaProtocolError("no such delegation token",
                                         code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
            if not info.may_renew(principal):
                raise KafkaProtocolError(
                    f"{principal} is not the owner or a renewer of the token",
                    code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
            now = self._now()
            new = change(info, now)
            if new is not None and info.expired(now):
                await self._delete(info)
                raise KafkaProtocolError("the delegation token has expired",
                                         code=ErrorCode.DELEGATION_TOKEN_EXPIRED)
            if new is None:
                await self._delete(info)
                return now
            try:
                await self._store.set(_path(info.token_id), new.to_json(), info.version)
            except (BadVersionError, NoNodeError):
                continue
            return new.expiry_ms
        raise MetadataError("the delegation token kept changing; giving up")

    async def renew(self, token_hmac: bytes, principal: str, renew_period_ms: int) -> int:
        """Push the expiry to now + the period (< 0: the server's), never past the max;
        the new expiry timestamp."""
        period = self.renew_ms if renew_period_ms < 0 else renew_period_ms
        return await self._update(token_hmac, principal, lambda info, now: replace(
            info, expiry_ms=min(info.max_ms, now + period)))

    async def expire(self, token_hmac: bytes, principal: str, period_ms: int) -> int:
        """Expire now (period < 0: the token is deleted) or at now + period (never past the
        max); the new expiry timestamp."""
        def change(info: TokenInfo, now: int) -> TokenInfo | None:
            if period_ms < 0:
                return None
            return replace(info, expiry_ms=min(info.max_ms, now + period_ms))
        return await self._update(token_hmac, principal, change)

    async def scram_credential(self, token_id: str,
                               mechanism: str) -> tuple[ScramCredential, TokenInfo] | None:
        """The SCRAM credential that checks a login as this token (password: the base64
        HMAC, as Kafka's clients send it) and the token; None for no live token."""
        try:
            info = await self.get(token_id)
        except (ValueError, MetadataError):
            log.warning("cannot read delegation token", extra={"token_id": token_id},
                        exc_info=True)
            return None
        if info is None:
            return None
        key = (token_id, mechanism)
        credential = self._credentials.get(key)
        if credential is None:
            password = base64.b64encode(self.hmac_of(token_id)).decode("ascii")
            credential = await trio.to_thread.run_sync(
                make_credential, mechanism, password, MIN_ITERATIONS, secrets.token_bytes(32))
            if len(self._credentials) >= _CREDENTIAL_CACHE_SIZE:
                self._credentials.pop(next(iter(self._credentials)))
            self._credentials[key] = credential
        return credential, info

    async def run_purge(self, interval_s: float = 60.0) -> None:
        """Purge expired tokens every `interval_s` (Kafka: delegation.token.expiry.check
        .interval.ms) until cancelled; a store failure is one WARNING and a retry."""
        while True:
            await trio.sleep(interval_s)
            try:
                await self.purge()
            except (MetadataError, ValueError) as exc:
                log.warning("delegation token purge failed: %s", exc)


__all__ = ["DelegationTokenStore", "TokenInfo", "new_token_id"]
