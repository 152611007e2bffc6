"""Durable RocketMQ subscription-group configs (mqadmin updateSubGroup / deleteSubGroup), kept
in the metadata store next to the topic catalogue, one node per group:

    /ledgerwire/rocketmq/subscription-groups/<group>   {"format": 1, "config": {...}}

Every broker sharing the store sees the same groups.  Admin reads (`get`, `all`) go to the
store, so a change made through one broker is what the next admin read on any broker returns.
Updates are compare-and-set on the node's version (create, or set at the version just read; a
lost race is retried), and each put/delete then bumps the data of the root node itself, the
change marker that `follow` watches.

The pull path must not read the store per request: it asks `cached(group)`, an in-memory copy
of every stored config that `follow` keeps fresh (re-read on every change marker, and at least
every `refresh_interval_s` in case a marker was missed), and that this process's own writes
update at once.  A broker whose follower has not loaded yet answers None (the defaults).

This module must never interpret the config: the handlers own its fields and defaults.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

log = logging.getLogger("ledgerwire.rocketmq.subscription_groups")

SUBSCRIPTION_GROUPS_PATH = "/ledgerwire/rocketmq/subscription-groups"
FORMAT_VERSION = 1
CAS_ATTEMPTS = 8
REFRESH_INTERVAL_S = 30.0
RETRY_PAUSE_S = 0.5


class SubscriptionGroupStoreError(Exception):
    """A stored group config cannot be read (bad data or an unknown format version)."""


def _encode(config: dict[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT_VERSION, "config": config},
                      separators=(",", ":"), sort_keys=True).encode("utf-8")


def _decode(path: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SubscriptionGroupStoreError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
        raise SubscriptionGroupStoreError(f"{path}: unknown format {doc!r:.80}")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise SubscriptionGroupStoreError(f"{path}: config is not an object")
    return config


class SubscriptionGroupStore:
    def __init__(self, store: MetadataStore, root: str = SUBSCRIPTION_GROUPS_PATH) -> None:
        self._store = store
        self._root = root
        self._cache: dict[str, dict[str, Any]] = {}
        self.loaded = False  # True once `reload` (or `follow`) read the store

    def _path(self, group: str) -> str:
        return f"{self._root}/{group}"

    # --- the in-memory copy (the pull path) -------------------------------------------------

    def cached(self, group: str) -> dict[str, Any] | None:
        """The group's stored config as last read or written here; never touches the store."""
        return self._cache.get(group)

    async def reload(self) -> None:
        """Replace the in-memory copy with what the store holds now (unreadable configs are
        left out and logged)."""
        found: dict[str, dict[str, Any]] = {}
        try:
            names = await self._store.children(self._root)
        except NoNodeError:
            names = []
        for name in names:
            try:
                config = await self.get(name)
            except SubscriptionGroupStoreError as exc:
                log.warning("subscription group config not usable: %s", exc)
                continue
            if config is not None:
                found[name] = config
        self._cache = found
        self.loaded = True

    async def follow(self, *, refresh_interval_s: float = REFRESH_INTERVAL_S) -> None:
        """Keep the in-memory copy fresh until cancelled (or the store closes): re-read on every
        change marker, and every `refresh_interval_s` regardless."""
        while True:
            try:
                async with self._store.watch(self._root) as watcher:
                    while True:
                        await self.reload()
                        with trio.move_on_after(refresh_interval_s):
                            await watcher.__anext__()
            except StopAsyncIteration:
                return
            except MetadataError as exc:
                log.warning("subscription group follower: %r; retrying", exc)
                await trio.sleep(RETRY_PAUSE_S)

    async def _touch(self) -> None:
        """Bump the root node's data: followers in other processes re-read."""
        try:
            await self._store.set(self._root, b"", -1)
        except NoNodeError:
            try:
                await self._store.create(self._root, b"", make_parents=True)
            except NodeExistsError:
                await self._store.set(self._root, b"", -1)

    # --- the store (admin requests) ---------------------------------------------------------

    async def get(self, group: str) -> dict[str, Any] | None:
        path = self._path(group)
        try:
            data, _ = await self._store.get(path)
        except NoNodeError:
            return None
        return _decode(path, data)

    async def all(self) -> dict[str, dict[str, Any]]:
        try:
            names = await self._store.children(self._root)
        except NoNodeError:
            return {}
        found: dict[str, dict[str, Any]] = {}
        for name in names:
            config = await self.get(name)
            if config is not None:  # deleted between the listing and the read
                found[name] = config
        return found

    async def put(self, group: str, config: dict[str, Any]) -> None:
        await self._put(group, config)
        self._cache[group] = dict(config)
        await self._touch()

    async def _put(self, group: str, config: dict[str, Any]) -> None:
        path = self._path(group)
        data = _encode(config)
        for _ in range(CAS_ATTEMPTS):
            try:
                _, stat = await self._store.get(path)
            except NoNodeError:
                try:
                    await self._store.create(path, data, make_parents=True)
                    return
                except NodeExistsError:
                    continue
            try:
                await self._store.set(path, data, stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue
        raise SubscriptionGroupStoreError(f"{path}: too many concurrent updates")

    async def delete(self, group: str) -> bool:
        """Remove the group's config; False if there was none."""
        try:
            await self._store.delete(self._path(group))
        except NoNodeError:
            self._cache.pop(group, None)
            return False
        self._cache.pop(group, None)
        await self._touch()
        return True
