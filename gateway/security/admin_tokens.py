"""Bearer tokens for the admin HTTP surface, kept hashed in the metadata store.

A token reads `lwt_<id>_<secret>`: `id` is 16 hex digits naming the node
/ledgerwire/admin-tokens/<id>, `secret` is 32 random bytes (base64url).  The node holds JSON
{"format": 1, "principal": "User:alice", "secret_sha256": hex, "created_ms", "expires_ms"
(0 = never), "description"}.  Only the SHA-256 of the secret is stored: the secret has 256
random bits, so a fast hash is enough (no password to stretch), and whoever reads the store
still cannot present the token.  A token acts as its principal: the ACLs decide what it may do,
exactly as for that user logging in with SASL.

`ledgerwire tokens create|list|revoke` (gateway/cli) and the admin API's /admin/v1/tokens use
`TokenStore`; the admin authenticator calls `verify` per request (one store read, no cache:
a revoked token stops working at once).

This module must never store, log or return a token's secret after `create` hands it out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass

from ledger_backend.metadata.store import MetadataError, MetadataStore, NodeExistsError, NoNodeError

TOKENS_PATH = "/ledgerwire/admin-tokens"
TOKEN_FORMAT_VERSION = 1
_TOKEN_RE = re.compile(r"^lwt_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_PRINCIPAL_RE = re.compile(r"^User:[^\s]{1,200}$")


class TokenError(ValueError):
    """A token request that cannot be honoured (bad principal, unknown id)."""


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    principal: str
    created_ms: int
    expires_ms: int  # 0: never
    description: str

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms != 0 and now_ms >= self.expires_ms

    def to_json(self) -> dict[str, object]:
        return {"id": self.token_id, "principal": self.principal, "created_ms": self.created_ms,
                "expires_ms": self.expires_ms, "description": self.description}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _decode(token_id: str, data: bytes) -> tuple[TokenInfo, str]:
    doc = json.loads(data)
    if doc.get("format") != TOKEN_FORMAT_VERSION:
        raise ValueError(f"admin token node: unknown format {doc.get('format')}")
    info = TokenInfo(token_id, str(doc["principal"]), int(doc["created_ms"]),
                     int(doc.get("expires_ms", 0)), str(doc.get("description", "")))
    return info, str(doc["secret_sha256"])


class TokenStore:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def create(self, principal: str, *, ttl_s: int = 0,
                     description: str = "") -> tuple[str, TokenInfo]:
        """A new token for `principal` ("User:NAME"); returns (the token text, its info)."""
        if not _PRINCIPAL_RE.match(principal):
            raise TokenError("principal must look like User:NAME")
        if ttl_s < 0:
            raise TokenError("ttl must be 0 (never expires) or positive seconds")
        if len(description) > 200:
            raise TokenError("description: at most 200 characters")
        secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        now = _now_ms()
        for _ in range(5):
            token_id = secrets.token_hex(8)
            info = TokenInfo(token_id, principal, now, now + ttl_s * 1000 if ttl_s else 0,
                             description)
            doc = {"format": TOKEN_FORMAT_VERSION, "principal": principal,
                   "secret_sha256": _digest(secret), "created_ms": info.created_ms,
                   "expires_ms": info.expires_ms, "description": description}
            try:
                await self._store.create(f"{TOKENS_PATH}/{token_id}",
                                         json.dumps(doc, sort_keys=True).encode(),
                                         make_parents=True)
            except NodeExistsError:
                continue  # 64 random bits collided: draw again
            return f"lwt_{token_id}_{secret}", info
        raise MetadataError("could not find a free token id")

    async def verify(self, token: str) -> str | None:
        """The principal `token` stands for, or None (malformed, unknown, expired, revoked)."""
        match = _TOKEN_RE.match(token)
        if match is None:
            return None
        token_id, secret = match.groups()
        try:
            data, _ = await self._store.get(f"{TOKENS_PATH}/{token_id}")
            info, digest = _decode(token_id, data)
        except (NoNodeError, ValueError, KeyError):
            return None
        if not hmac.compare_digest(digest, _digest(secret)) or info.expired(_now_ms()):
            return None
        return info.principal

    async def list(self) -> list[TokenInfo]:
        try:
            names = await self._store.children(TOKENS_PATH)
        except NoNodeError:
            return []
        out = []
        for name in sorted(names):
            try:
                data, _ = await self._store.get(f"{TOKENS_PATH}/{name}")
                out.append(_decode(name, data)[0])
            except (NoNodeError, ValueError, KeyError):
                continue  # revoked meanwhile, or not ours
        return out

    async def revoke(self, token_id: str) -> bool:
        """Delete a token by id (the part after `lwt_`); False when there was none."""
        if not re.fullmatch(r"[0-9a-f]{16}", token_id):
            raise TokenError("a token id is 16 hex digits (the part after lwt_)")
        try:
            await self._store.delete(f"{TOKENS_PATH}/{token_id}")
        except NoNodeError:
            return False
        return True
