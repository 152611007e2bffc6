"""A read-only view of an embedded metadata store's directory ("embedded-ro:DIR" in open_store).

For readers outside the broker (the Spark bridge, offline tools) that look at a `ledgerwire
standalone`'s metadata while that standalone may be running.  The embedded store of a running
standalone is locked by its process (an exclusive flock on metadata.lock), so such readers cannot
open it with "embedded:DIR"; and they must not anyway: opening the embedded store as a session
drops every ephemeral node left in it (the running broker's bookie registrations) and writes.
`ReadOnlyEmbeddedStore` opens the sqlite file with `mode=ro` instead, takes no lock and serves
get/exists/children only; every write, watch and session-event request raises
`ReadOnlyStoreError`.  sqlite's WAL lets it read consistent snapshots while the broker writes.
The blocking `*_sync` methods are for plain threads (Spark executors); the async ones run them
in `trio.to_thread`.

This module must never write to the database, never take or touch the store's lock file, and
never create the database or its directory.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from .sqlite_tree import DB_FILE
from .store import (
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

URL_PREFIX = "embedded-ro:"


class ReadOnlyStoreError(MetadataError):
    """A write (or a watch) was attempted on a read-only metadata view."""


class ReadOnlyEmbeddedStore(MetadataStore):
    """get/exists/children on an embedded store's sqlite file, opened read-only, no lock."""

    def __init__(self, directory: str | Path) -> None:
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

    # ---- blocking reads (plain threads) ----------------------------------------------------

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

    def close_sync(self) -> None:
        if not self._closed:
            self._closed = True
            with self._lock:
                self._conn.close()

    # ---- MetadataStore -----------------------------------------------------------------------

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
        raise ReadOnlyStoreError(f"create {path}: this metadata view is read-only")

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        raise ReadOnlyStoreError(f"set {path}: this metadata view is read-only")

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        raise ReadOnlyStoreError(f"delete {path}: this metadata view is read-only")

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        raise ReadOnlyStoreError("multi: this metadata view is read-only")

    async def next_id(self, counter_path: str) -> int:
        raise ReadOnlyStoreError(f"next_id {counter_path}: this metadata view is read-only")

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        raise ReadOnlyStoreError("watches are not supported by the read-only metadata view")

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        raise ReadOnlyStoreError("session events are not supported by the read-only view")

    async def close(self) -> None:
        self.close_sync()
        await trio.lowlevel.checkpoint()


async def open_embedded_readonly(directory: str | Path) -> ReadOnlyEmbeddedStore:
    """Open the read-only view of the embedded store in `directory` (NoNodeError if none)."""
    return await trio.to_thread.run_sync(ReadOnlyEmbeddedStore, directory)
