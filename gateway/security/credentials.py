"""SASL user credentials in the metadata store: SCRAM salted hashes, never passwords.

One node per user, /ledgerwire/users/<url-quoted name>, holding JSON {"format": 1,
"credentials": {"SCRAM-SHA-512": {salt, iterations, stored_key, server_key}, ...}}, changed by
compare-and-set on its version.  PLAIN logins are checked against the user's SCRAM credential
(SHA-512 preferred), so a user added for SCRAM can also log in with PLAIN over TLS.

`CredentialStore.lookup` is what the SASL handlers call per login (one store read);
`mechanisms_of` and `alter` serve Kafka's Describe/AlterUserScramCredentials (the same store
`ledgerwire users` manages); `ensure_user` is idempotent (keeps a credential whose password
still matches) so users listed in the broker configuration can be applied at every start.
PBKDF2 runs in a worker thread.

This module must never store, return or log a password.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote, unquote

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from protocols.kafka.sasl import (
    DEFAULT_ITERATIONS,
    PLAIN,
    SCRAM_HASHES,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    make_credential,
)

log = logging.getLogger("ledgerwire.credentials")

USERS_PATH = "/ledgerwire/users"
USER_FORMAT_VERSION = 1
_CAS_ATTEMPTS = 20


def _path(user: str) -> str:
    if not user:
        raise ValueError("empty user name")
    return f"{USERS_PATH}/{quote(user, safe='')}"


def _decode(data: bytes) -> dict[str, ScramCredential]:
    doc = json.loads(data)
    if doc.get("format") != USER_FORMAT_VERSION:
        raise ValueError(f"user node: unknown format {doc.get('format')}")
    return {m: ScramCredential.from_json(c) for m, c in doc.get("credentials", {}).items()}


def _encode(credentials: dict[str, ScramCredential]) -> bytes:
    return json.dumps({"format": USER_FORMAT_VERSION,
                       "credentials": {m: c.to_json() for m, c in credentials.items()}},
                      sort_keys=True).encode()


class CredentialStore:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def _read(self, user: str) -> tuple[dict[str, ScramCredential], int] | None:
        try:
            data, stat = await self._store.get(_path(user))
        except NoNodeError:
            return None
        return _decode(data), stat.version

    async def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential that checks `user`'s login with `mechanism`, or None."""
        try:
            found = await self._read(user)
        except (ValueError, MetadataError):
            log.warning("cannot read credentials", extra={"user": user}, exc_info=True)
            return None
        if found is None:
            return None
        credentials = found[0]
        if mechanism == PLAIN:
            return credentials.get(SCRAM_SHA_512) or credentials.get(SCRAM_SHA_256)
        return credentials.get(mechanism)

    async def mechanisms_of(self, user: str) -> dict[str, int] | None:
        """mechanism -> iterations of `user`'s credentials, or None when it has none."""
        found = await self._read(user)
        if found is None or not found[0]:
            return None
        return {m: c.iterations for m, c in found[0].items()}

    async def alter(self, user: str, change: dict[str, ScramCredential | None]) -> None:
        """Set (a credential) or remove (None) the given mechanisms of `user` in one
        compare-and-set; the user disappears when no credential is left."""
        await self._change(user, change)

    async def _change(self, user: str, change: dict[str, ScramCredential | None]) -> None:
        for _ in range(_CAS_ATTEMPTS):
            found = await self._read(user)
            current, version = found if found is not None else ({}, -2)
            for mechanism, credential in change.items():
                if credential is None:
                    current.pop(mechanism, None)
                else:
                    current[mechanism] = credential
            try:
                if version == -2:
                    if current:
                        await self._store.create(_path(user), _encode(current),
                                                 make_parents=True)
                elif current:
                    await self._store.set(_path(user), _encode(current), version)
                else:
                    await self._store.delete(_path(user), version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        raise MetadataError(f"the credentials of {user!r} kept changing; giving up")

    async def set_password(self, user: str, password: str, mechanisms: tuple[str, ...],
                           iterations: int = DEFAULT_ITERATIONS) -> None:
        """Store fresh SCRAM credentials of `user` for each mechanism (new random salts)."""
        new: dict[str, ScramCredential | None] = {}
        for mechanism in mechanisms:
            if mechanism not in SCRAM_HASHES:
                raise ValueError(f"credentials are stored for SCRAM mechanisms only, "
                                 f"not {mechanism}")
            new[mechanism] = await trio.to_thread.run_sync(
                make_credential, mechanism, password, iterations)
        await self._change(user, new)

    async def ensure_user(self, user: str, password: str,
                          mechanisms: tuple[str, ...] = (SCRAM_SHA_256, SCRAM_SHA_512)) -> bool:
        """Make `user` log in with `password`; False when it already did (nothing written)."""
        found = await self._read(user)
        current = found[0] if found is not None else {}
        stale: list[str] = []
        for mechanism in mechanisms:
            credential = current.get(mechanism)
            if credential is None or not await trio.to_thread.run_sync(
                    credential.check_password, password):
                stale.append(mechanism)
        if stale:
            await self.set_password(user, password, tuple(stale))
        return bool(stale)

    async def delete(self, user: str, mechanisms: tuple[str, ...] | None = None) -> bool:
        """Remove the user's credentials (all, or those mechanisms); False if there were none."""
        found = await self._read(user)
        if found is None:
            return False
        doomed = tuple(found[0]) if mechanisms is None else mechanisms
        if not any(m in found[0] for m in doomed):
            return False
        await self._change(user, {m: None for m in doomed})
        return True

    async def list_users(self) -> dict[str, list[str]]:
        """user -> the mechanisms it has credentials for."""
        try:
            names = await self._store.children(USERS_PATH)
        except NoNodeError:
            return {}
        out: dict[str, list[str]] = {}
        for name in names:
            user = unquote(name)
            found = await self._read(user)
            if found is not None:
                out[user] = sorted(found[0])
        return out
