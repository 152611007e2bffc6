"""Where a Spark job finds ledgerwire: the `ledgerwire.metadata` option, read-only.

`ledgerwire.metadata` is one of
  - "zk://host:2181/chroot"          a cluster's ZooKeeper ensemble (a normal kazoo session;
                                      the bridge only ever reads from it);
  - a `ledgerwire standalone` data directory (it holds metadata/ and bookies/<i>/);
  - "embedded:/dir" or "embedded-ro:/dir", or the metadata directory itself (it holds
    metadata.db).

The embedded store of a running standalone is locked by that process (an exclusive flock on
metadata.lock), so the bridge cannot use `ledger_backend.metadata.open_store` on it; and it must
not anyway: opening the embedded store drops every ephemeral node (bookie registrations) and
writes. `ReadOnlyEmbeddedStore` opens the sqlite file with `mode=ro` instead, takes no lock and
serves get/exists/children only; every write raises. sqlite's WAL lets it read consistent
snapshots while the broker writes.

(Proposed for ledger_backend/metadata: an "embedded-ro:/dir" URL in `open_store` returning this
store. Until it is merged it lives here, and nothing outside spark_bridge depends on it.)

This module must never write to a metadata store, never take the embedded store's lock, and
never keep a kazoo session open longer than the caller's `with` block.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from ledger_backend.metadata import open_store
from ledger_backend.metadata.embedded import DB_FILE
from ledger_backend.metadata.store import (
    MetadataError,
    MetadataStore,
    NoNodeError,
    Op,
    OpResult,
    SessionState,
    Stat,
    Watcher,
    validate_path,
)

METADATA_OPTION = "ledgerwire.metadata"


class ReadOnlyStoreError(MetadataError):
    """A write was attempted on the bridge's read-only metadata view."""


@dataclass(frozen=True)
class ConnectionSpec:
    """Resolved `ledgerwire.metadata`: the store to read, and (standalone only) the bookie
    data directories that hold the entries when the standalone's bookies are not running."""

    metadata_url: str          # "zk://..." or "embedded-ro:<metadata dir>"
    bookie_dirs: tuple[str, ...] = ()

    @property
    def is_embedded(self) -> bool:
        return self.metadata_url.startswith("embedded-ro:")


def resolve_connection(value: str | None) -> ConnectionSpec:
    """Turn the option's value into a ConnectionSpec; ValueError names the option."""
    if value is None or not value.strip():
        raise ValueError(
            f"option '{METADATA_OPTION}' is required: a ledgerwire standalone data directory "
            "or a zk://host:port/chroot URL"
        )
    value = value.strip()
    if value.startswith("zk://"):
        return ConnectionSpec(value)
    for prefix in ("embedded-ro:", "embedded:"):
        if value.startswith(prefix):
            value = value[len(prefix):]
            if value.startswith("//"):
                value = value[2:]
    root = Path(value).expanduser()
    if (root / "metadata" / DB_FILE).is_file():
        return ConnectionSpec(f"embedded-ro:{(root / 'metadata').resolve()}",
                              _bookie_dirs(root / "bookies"))
    if (root / DB_FILE).is_file():
        return ConnectionSpec(f"embedded-ro:{root.resolve()}",
                              _bookie_dirs(root.parent / "bookies"))
    raise ValueError(
        f"option '{METADATA_OPTION}'={value!r}: no ledgerwire metadata there (expected "
        f"{root / 'metadata' / DB_FILE} or {root / DB_FILE}) and not a zk:// URL"
    )


def _bookie_dirs(bookies: Path) -> tuple[str, ...]:
    """A standalone's bookie directories, bookies/0, bookies/1, ... in index order."""
    if not bookies.is_dir():
        return ()
    dirs = sorted((p for p in bookies.iterdir() if p.is_dir()),
                  key=lambda p: (len(p.name), p.name))  # fmt: skip
    return tuple(str(d.resolve()) for d in dirs)


class ReadOnlyEmbeddedStore(MetadataStore):
    """get/exists/children on an embedded store's sqlite file, opened read-only, no lock."""

    def __init__(self, directory: str) -> None:
        path = Path(directory) / DB_FILE
        if not path.is_file():
            raise NoNodeError(f"no metadata database at {path}")
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self._closed = False

    def _query(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        if self._closed:
            raise MetadataError("metadata store is closed")
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise MetadataError(f"metadata database error: {exc}") from exc

    def get_sync(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        rows = self._query(
            "SELECT data, version, ctime_ms, mtime_ms, owner, num_children FROM nodes "
            "WHERE path = ?", (path,))
        if not rows:
            raise NoNodeError(path)
        data, version, ctime, mtime, owner, children = rows[0]
        return bytes(data), Stat(int(version), int(ctime), int(mtime), owner != 0, int(children))

    def children_sync(self, path: str) -> list[str]:
        validate_path(path)
        if not self._query("SELECT 1 FROM nodes WHERE path = ?", (path,)):
            raise NoNodeError(path)
        rows = self._query("SELECT path FROM nodes WHERE parent = ?", (path,))
        cut = 1 if path == "/" else len(path) + 1
        return sorted(str(p)[cut:] for (p,) in rows)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        return await trio.to_thread.run_sync(self.get_sync, path)

    async def exists(self, path: str) -> Stat | None:
        try:
            return (await self.get(path))[1]
        except NoNodeError:
            return None

    async def children(self, path: str) -> list[str]:
        return await trio.to_thread.run_sync(self.children_sync, path)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        raise ReadOnlyStoreError(f"create {path}: the Spark bridge's metadata view is read-only")

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        raise ReadOnlyStoreError(f"set {path}: the Spark bridge's metadata view is read-only")

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        raise ReadOnlyStoreError(f"delete {path}: the Spark bridge's metadata view is read-only")

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        raise ReadOnlyStoreError("multi: the Spark bridge's metadata view is read-only")

    async def next_id(self, counter_path: str) -> int:
        raise ReadOnlyStoreError(f"next_id {counter_path}: the metadata view is read-only")

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        raise ReadOnlyStoreError("watches are not supported by the read-only metadata view")

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        raise ReadOnlyStoreError("session events are not supported by the read-only view")

    def close_sync(self) -> None:
        if not self._closed:
            self._closed = True
            with self._lock:
                self._conn.close()

    async def close(self) -> None:
        self.close_sync()
        await trio.lowlevel.checkpoint()


async def open_readonly_store(spec: ConnectionSpec) -> MetadataStore:
    """A store to read from: read-only sqlite for embedded metadata, kazoo for ZooKeeper."""
    if spec.is_embedded:
        directory = spec.metadata_url[len("embedded-ro:"):]
        return await trio.to_thread.run_sync(ReadOnlyEmbeddedStore, directory)
    return await open_store(spec.metadata_url)
