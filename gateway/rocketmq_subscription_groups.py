"""Durable RocketMQ subscription-group configs (mqadmin updateSubGroup / deleteSubGroup), kept
in the metadata store next to the topic catalogue, one node per group:

    /ledgerwire/rocketmq/subscription-groups/<group>   {"format": 1, "config": {...}}

Every broker sharing the store sees the same groups; nothing is cached, so a change made
through one broker is what the next read on any broker returns.  Updates are compare-and-set
on the node's version (create, or set at the version just read; a lost race is retried).

This module must never interpret the config: the handlers own its fields and defaults.
"""

from __future__ import annotations

import json
from typing import Any

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

SUBSCRIPTION_GROUPS_PATH = "/ledgerwire/rocketmq/subscription-groups"
FORMAT_VERSION = 1
CAS_ATTEMPTS = 8


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

    def _path(self, group: str) -> str:
        return f"{self._root}/{group}"

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
            return False
        return True
