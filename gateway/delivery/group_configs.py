"""Durable per-group configs of share groups (Kafka's group resource: share.record.lock.duration.ms,
share.delivery.count.limit, share.auto.offset.reset, share.isolation.level), one metadata-store
node per group:

    /ledgerwire/share-groups/<group>   {"format": 1, "config": {name: value}}

A node also marks the group as known (ListGroups shows it after a restart).  Writes are
compare-and-set on the node version; reads on the hot path use an in-memory copy re-read from
the store at most every `refresh_s` seconds (so a change made through another broker is seen
within that time).

This module must never interpret the values: callers validate them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Final

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

log = logging.getLogger("ledgerwire.delivery.group_configs")

SHARE_GROUPS_PATH: Final = "/ledgerwire/share-groups"
FORMAT_VERSION: Final = 1
CAS_ATTEMPTS: Final = 8


class GroupConfigError(Exception):
    """A stored group config cannot be read, or a write lost too many races."""


class ShareGroupConfigs:
    def __init__(self, store: MetadataStore, root: str = SHARE_GROUPS_PATH,
                 refresh_s: float = 5.0) -> None:
        self._store = store
        self._root = root
        self._refresh_s = refresh_s
        self._cache: dict[str, dict[str, str]] = {}
        self._read_at = -float("inf")

    def cached(self, group: str) -> dict[str, str]:
        return self._cache.get(group, {})

    def groups(self) -> list[str]:
        return sorted(self._cache)

    async def reload(self, *, if_older_than_s: float = 0.0) -> None:
        if trio.current_time() - self._read_at < if_older_than_s:
            return
        self._read_at = trio.current_time()
        try:
            names = await self._store.children(self._root)
        except NoNodeError:
            names = []
        found: dict[str, dict[str, str]] = {}
        for name in names:
            try:
                data, _ = await self._store.get(f"{self._root}/{name}")
            except NoNodeError:
                continue
            try:
                found[name] = _decode(data)
            except GroupConfigError as exc:
                log.warning("share group %s: stored config not usable: %s", name, exc)
        self._cache = found

    async def read(self, group: str) -> dict[str, str]:
        """The group's stored config, read from the store now (and cached)."""
        try:
            data, _ = await self._store.get(f"{self._root}/{group}")
        except NoNodeError:
            self._cache.pop(group, None)
            return {}
        try:
            self._cache[group] = _decode(data)
        except GroupConfigError as exc:
            log.warning("share group %s: stored config not usable: %s", group, exc)
            return self._cache.get(group, {})
        return self._cache[group]

    async def refresh(self) -> None:
        """Re-read the store if the copy is older than `refresh_s`."""
        await self.reload(if_older_than_s=self._refresh_s)

    async def update(self, group: str,
                     change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Apply `change` to the group's stored config (CAS; created if missing)."""
        path = f"{self._root}/{group}"
        for _ in range(CAS_ATTEMPTS):
            try:
                data, stat = await self._store.get(path)
                current, version = _decode(data), stat.version
            except NoNodeError:
                current, version = {}, None
            new = change(dict(current))
            encoded = json.dumps({"format": FORMAT_VERSION, "config": new},
                                 sort_keys=True).encode()
            try:
                if version is None:
                    await self._store.create(path, encoded, make_parents=True)
                else:
                    await self._store.set(path, encoded, version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue
            self._cache[group] = new
            return new
        raise GroupConfigError(f"{path}: too many concurrent updates")

    async def delete(self, group: str) -> None:
        try:
            await self._store.delete(f"{self._root}/{group}")
        except NoNodeError:
            pass
        self._cache.pop(group, None)


def _decode(data: bytes) -> dict[str, str]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise GroupConfigError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
        raise GroupConfigError(f"unknown format {doc!r:.80}")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise GroupConfigError("config is not an object")
    return {str(k): str(v) for k, v in config.items()}
