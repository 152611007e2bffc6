"""The embedded metadata store: one node, durable, no other service (`ledgerwire standalone`).

The tree and its durability rule live in sqlite_tree.py (sqlite, WAL, synchronous=FULL, one
transaction per call, one owner process per directory). This module makes sessions of it:
every `EmbeddedMetadataStore` object is one session. Several objects may share one tree
in-process (opening the same directory twice, or "memory:NAME" twice) and then see each
other's nodes and watch events, as ZooKeeper clients do. Ephemeral nodes of a session go when
it closes; when a directory is first opened in a process, every ephemeral node in it belonged
to a dead process and is removed. The session is never SUSPENDED or LOST.

Writes on a directory run in `trio.to_thread` (one worker per session) behind the tree's lock,
queued writes committed together (group commit: one writer commits, the others wait on their
own event);
reads run on the Trio thread on the tree's read connection (they never wait for a COMMIT).
"memory:" is the same engine on an in-memory sqlite database, run inline on the Trio thread
(no worker thread, so tests with autojump_clock behave); "memory:NAME" is shared by name
within the process while any session on it is open.

Watch events are queued in commit order by the tree and dispatched on the Trio thread after
each call returns. This module must never import kazoo nor hold the tree's lock on the Trio
thread while a worker may need it.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import trio

from .sqlite_tree import (
    DB_FILE,
    LOCK_FILE,
    PendingWrite,
    SqliteTree,
    acquire_tree,
    memory_tree,
    open_file_tree,
    release_tree,
)
from .store import (
    MetadataError,
    MetadataStore,
    NoNodeError,
    Op,
    OpResult,
    SessionBroadcaster,
    SessionState,
    Stat,
    Watcher,
    WatchEvent,
    validate_path,
)

__all__ = ["DB_FILE", "LOCK_FILE", "EmbeddedMetadataStore", "open_embedded", "open_memory"]

T = TypeVar("T")
_anonymous_memory = itertools.count(1)


class EmbeddedMetadataStore(MetadataStore):
    """One session on an embedded database (see the module docstring)."""

    def __init__(self, db: SqliteTree) -> None:
        self._db = db
        self.session_id = next(db.sessions)
        self._watchers: set[Watcher] = set()
        self._sessions = SessionBroadcaster(SessionState.CONNECTED)
        self._closed = False
        # calls serialise on db.lock anyway: one worker thread per session is enough and
        # keeps a burst of metadata calls from occupying Trio's whole thread pool
        self._thread_limiter = trio.CapacityLimiter(1)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise MetadataError("metadata store is closed")
        db = self._db

        def locked() -> T:
            with db.lock:
                try:
                    return fn(*args)
                except sqlite3.Error as exc:
                    raise MetadataError(f"metadata database error: {exc}") from exc

        try:
            if db.inline:
                await trio.lowlevel.checkpoint()
                return locked()
            return await trio.to_thread.run_sync(locked, limiter=self._thread_limiter)
        finally:
            db.dispatch_events()

    async def _write(self, body: Callable[[list[WatchEvent]], T]) -> T:
        """Run a write; writes queued while a batch commits share the next COMMIT (one fsync
        for all of them: sqlite_tree.write_batch), in the order they were called."""
        db = self._db
        if db.inline:
            return await self._run(db.write, body)
        if self._closed:
            raise MetadataError("metadata store is closed")
        entry = PendingWrite(body)
        db.write_queue.append(entry)
        try:
            while not entry.done:
                if db.committing:  # ours goes in the next batch
                    entry.wake = trio.Event()
                    await entry.wake.wait()
                else:
                    await self._commit_queued()
        except BaseException:
            if not entry.done:  # cancelled before a batch took it: it never happens
                try:
                    db.write_queue.remove(entry)
                except ValueError:
                    pass
                _wake_next_committer(db)  # (it may have been woken to commit)
            raise  # (done: it committed, as a cancelled ZooKeeper call may have)
        if entry.error is not None:
            raise entry.error
        return cast(T, entry.result)

    async def _commit_queued(self) -> None:
        """Commit everything queued as one batch, then wake its writers and the first writer
        queued meanwhile (it commits the next batch) together: one pass of the event loop for
        all of them.  (A lock handed from waiter to waiter took one pass each: with a thousand
        partitions opening at once, a thousand passes, each with its epoll call, per COMMIT.)
        Shielded: the batch holds other callers' writes."""
        db = self._db
        db.committing = True
        batch = list(db.write_queue)
        db.write_queue.clear()
        try:
            with trio.CancelScope(shield=True):
                await self._run(db.write_batch, batch)
        finally:
            db.committing = False
            for entry in batch:
                if not entry.done:  # the batch never ran (a closed session)
                    entry.error, entry.done = MetadataError("metadata write not run"), True
                if entry.wake is not None:
                    entry.wake.set()
            _wake_next_committer(db)

    async def _read(self, on_reader: Callable[[str], T], on_writer: Callable[[str], T],
                    path: str) -> T:
        """A read on the Trio thread through the read connection (sqlite_tree.py), else (a
        memory tree, or the reader found the database busy) as any other call."""
        db = self._db
        if db.read_conn is not None and not self._closed:
            await trio.lowlevel.checkpoint()
            try:
                return on_reader(path)
            except sqlite3.OperationalError:
                pass  # busy: read through the writer's connection
            except sqlite3.Error as exc:
                raise MetadataError(f"metadata database error: {exc}") from exc
        return await self._run(on_writer, path)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        row = await self._read(self._db.read_row, self._db.row, path)
        if row is None:
            raise NoNodeError(path)
        return row.data, row.stat()

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        row = await self._read(self._db.read_row, self._db.row, path)
        return None if row is None else row.stat()

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        owner = self.session_id if ephemeral else 0
        db = self._db
        return await self._write(
            lambda ev: db.tx_create(ev, path, data, owner, sequential, make_parents))

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        db = self._db
        return await self._write(lambda ev: db.tx_set(ev, path, data, version))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        db = self._db
        await self._write(lambda ev: db.tx_delete(ev, path, version, recursive))

    async def children(self, path: str) -> list[str]:
        return await self._read(self._db.read_children, self._db.children, path)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        db, ops = self._db, list(ops)
        return await self._write(lambda ev: db.tx_multi(ev, ops, self.session_id))

    async def next_id(self, counter_path: str) -> int:
        db = self._db
        return await self._write(lambda ev: db.tx_next_id(ev, counter_path))

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        return Watcher(path, children, self._register_watcher, self._unregister_watcher)

    async def _register_watcher(self, watcher: Watcher) -> None:
        if self._closed:
            raise MetadataError("metadata store is closed")
        self._watchers.add(watcher)
        self._db.watchers.setdefault(watcher.path, set()).add(watcher)
        await trio.lowlevel.checkpoint()

    def _unregister_watcher(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)
        on_path = self._db.watchers.get(watcher.path)
        if on_path is not None:
            on_path.discard(watcher)
            if not on_path:
                del self._db.watchers[watcher.path]

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        return self._sessions.subscribe()

    async def close(self) -> None:
        if self._closed:
            return
        db = self._db
        with trio.CancelScope(shield=True):
            try:
                await self._run(
                    db.write, lambda ev: db.tx_drop_ephemerals(ev, self.session_id)
                )
            finally:
                self._closed = True
                for watcher in list(self._watchers):
                    watcher.end()
                    self._unregister_watcher(watcher)
                self._sessions.close()
                if db.inline:
                    release_tree(db)
                else:
                    await trio.to_thread.run_sync(release_tree, db)


def _wake_next_committer(db: SqliteTree) -> None:
    """The first queued writer commits the next batch (none is being committed)."""
    if not db.committing and db.write_queue:
        wake = db.write_queue[0].wake
        if wake is not None:
            wake.set()


async def open_embedded(directory: str | os.PathLike[str]) -> EmbeddedMetadataStore:
    """A new session on the durable store in directory (created if missing)."""
    def acquire() -> SqliteTree:
        path = Path(directory).expanduser().resolve()
        return acquire_tree(str(path), lambda: open_file_tree(path))

    return EmbeddedMetadataStore(await trio.to_thread.run_sync(acquire))


async def open_memory(name: str = "") -> EmbeddedMetadataStore:
    """A new session on an in-memory store: fresh if name is "", else shared by name."""
    key = f"memory:{name}" if name else f"memory:#anonymous-{next(_anonymous_memory)}"
    db = acquire_tree(key, lambda: memory_tree(key))
    await trio.lowlevel.checkpoint()
    return EmbeddedMetadataStore(db)

