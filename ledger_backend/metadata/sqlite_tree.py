"""The node tree of the embedded metadata store, on one sqlite database.

Durability rule: the tree lives in `<dir>/metadata.db` (WAL journal, synchronous=FULL), so a
write is on disk when its transaction commits, and no caller hears of a write before that.
Every public write runs in one `BEGIN IMMEDIATE` transaction, alone (`write`) or as one
savepoint of a group commit (`write_batch`: writes queued meanwhile share one COMMIT, so one
fsync), in which version checks and changes happen together: a compare-and-set cannot
interleave with another writer, and a failing write undoes only itself. The file carries
sqlite's own magic plus our application_id and a format version (user_version), checked at
open. An exclusive flock on `<dir>/metadata.lock` keeps a second process out. One connection
serves a process's writes; callers hold `SqliteTree.lock` around every call on it (they
block: run them in a worker thread). A second, query-only connection (`read_conn`, file trees
only) answers single reads on the Trio thread under `read_lock`: in WAL mode a reader never
waits for the writer's COMMIT or fsync, and sees every transaction committed before it began
(so a caller reads its own answered writes). A reader that does find the database busy (rare:
WAL recovery) gives up at once and the caller reads through the writer's connection instead.

Methods named `tx_*` run inside an open transaction and append the watch events they cause;
`write()` commits, then queues those events in commit order in `pending_events`;
`dispatch_events()` (Trio thread only, no lock: the deque is thread-safe) hands them to the
registered watchers.

This module must never await, import kazoo, or change the tree outside a transaction.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ledger_backend.secret_files import make_private_dir

from .store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
    parent_path,
    parse_counter,
    sequential_name,
    validate_path,
)

__all__ = ["DB_FILE", "LOCK_FILE", "PendingWrite", "SqliteTree", "acquire_tree", "memory_tree",
           "open_file_tree", "release_tree"]

T = TypeVar("T")

DB_FILE = "metadata.db"
LOCK_FILE = "metadata.lock"
APPLICATION_ID = 0x4C574D44  # "LWMD": marks the sqlite file as a ledgerwire metadata db
FORMAT_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    data BLOB NOT NULL,
    version INTEGER NOT NULL,
    ctime_ms INTEGER NOT NULL,
    mtime_ms INTEGER NOT NULL,
    owner INTEGER NOT NULL,          -- session id of an ephemeral node, 0 = persistent
    num_children INTEGER NOT NULL,
    seq INTEGER NOT NULL             -- next sequential-child counter
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent, path);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes (owner) WHERE owner != 0;
"""


class NodeRow(NamedTuple):
    data: bytes
    version: int
    ctime_ms: int
    mtime_ms: int
    owner: int
    num_children: int
    seq: int

    def stat(self) -> Stat:
        return Stat(self.version, self.ctime_ms, self.mtime_ms, self.owner != 0, self.num_children)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class PendingWrite:
    """One write waiting for a group commit (SqliteTree.write_batch)."""

    __slots__ = ("body", "done", "error", "result", "wake")

    def __init__(self, body: Callable[[list[WatchEvent]], object]) -> None:
        self.body = body
        self.result: object = None
        self.error: BaseException | None = None
        self.done = False
        self.wake: Any = None  # what its writer waits on (embedded.py: a trio.Event)


class SqliteTree:
    """The node tree on one sqlite connection, shared by all sessions of a process.

    Everything but dispatch_events() is called with `lock` held.
    """

    def __init__(self, key: str, conn: sqlite3.Connection, *, inline: bool,
                 lock_fd: int | None) -> None:
        self.key = key
        self.conn = conn
        self.inline = inline
        self.lock_fd = lock_fd
        self.lock = threading.Lock()
        self.read_conn: sqlite3.Connection | None = None
        self.read_lock = threading.Lock()
        self.pending_events: deque[WatchEvent] = deque()
        self.watchers: dict[str, set[Watcher]] = {}
        self.sessions = itertools.count(1)
        self.refcount = 0
        # group commit (embedded.py): writes queued while one batch commits (Trio thread only)
        self.write_queue: deque[PendingWrite] = deque()
        self.committing = False  # a batch of write_queue is being committed (embedded.py)

    # ---- setup -------------------------------------------------------------------------

    def initialise(self) -> None:
        conn = self.conn
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        user_version = conn.execute("PRAGMA user_version").fetchone()[0]
        has_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        if has_tables and (app_id != APPLICATION_ID or user_version != FORMAT_VERSION):
            raise MetadataError(
                f"{self.key}: not a ledgerwire metadata database of format {FORMAT_VERSION} "
                f"(application_id={app_id:#x}, user_version={user_version})"
            )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")
        conn.executescript(_SCHEMA)
        now = _now_ms()
        conn.execute(
            "INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, ?, ?, 0, 0, 0)", (now, now)
        )
        # every ephemeral node on disk belongs to a process that is gone
        self.write(lambda events: self.tx_drop_ephemerals(events, None))
        self.pending_events.clear()  # nobody could be watching yet

    # ---- transactions ------------------------------------------------------------------

    def write(self, body: Callable[[list[WatchEvent]], T]) -> T:
        events: list[WatchEvent] = []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(events)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        self.pending_events.extend(events)
        return result

    def write_batch(self, batch: Sequence[PendingWrite]) -> None:
        """Group commit: each write in its own savepoint (all or nothing, as alone), one
        COMMIT (one fsync) for the batch.  The outcome of each is in its PendingWrite, set
        only once the batch is durable; a failed COMMIT fails every write of the batch."""
        conn = self.conn
        events: list[WatchEvent] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for entry in batch:
                own: list[WatchEvent] = []
                conn.execute("SAVEPOINT one_write")
                try:
                    entry.result = entry.body(own)
                except (MetadataError, ValueError, sqlite3.Error) as exc:
                    conn.execute("ROLLBACK TO one_write")
                    entry.error = exc
                conn.execute("RELEASE one_write")
                events.extend(own)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for entry in batch:
                entry.result, entry.error = None, MetadataError(f"metadata write failed: {exc!r}")
                entry.done = True
            raise
        for entry in batch:
            entry.done = True
        self.pending_events.extend(events)

    def row(self, path: str, conn: sqlite3.Connection | None = None) -> NodeRow | None:
        found = (conn or self.conn).execute(
            "SELECT data, version, ctime_ms, mtime_ms, owner, num_children, seq "
            "FROM nodes WHERE path = ?",
            (path,),
        ).fetchone()
        return None if found is None else NodeRow(*found)

    def tx_create(self, events: list[WatchEvent], path: str, data: bytes, owner: int,
                  sequential: bool, make_parents: bool) -> str:
        validate_path(path)
        if path == "/":
            raise NodeExistsError("/")
        parent = parent_path(path)
        parent_row = self.row(parent)
        if parent_row is None:
            if not make_parents:
                raise NoNodeError(f"parent of {path} does not exist")
            self.tx_create(events, parent, b"", 0, False, True)
            parent_row = self.row(parent)
            assert parent_row is not None
        if parent_row.owner != 0:
            raise MetadataError(f"ephemeral node {parent} cannot have children")
        actual = path
        if sequential:
            actual = sequential_name(path, parent_row.seq)
            self.conn.execute("UPDATE nodes SET seq = seq + 1 WHERE path = ?", (parent,))
        if self.row(actual) is not None:
            raise NodeExistsError(actual)
        now = _now_ms()
        self.conn.execute(
            "INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?, ?, 0, 0)",
            (actual, parent, bytes(data), now, now, owner),
        )
        self.conn.execute(
            "UPDATE nodes SET num_children = num_children + 1 WHERE path = ?", (parent,)
        )
        events.append(WatchEvent(actual, "created"))
        events.append(WatchEvent(parent, "children"))
        return actual

    def tx_set(self, events: list[WatchEvent], path: str, data: bytes, version: int) -> Stat:
        validate_path(path)
        row = self.row(path)
        if row is None:
            raise NoNodeError(path)
        if version != -1 and row.version != version:
            raise BadVersionError(f"{path}: version {row.version}, expected {version}")
        now = _now_ms()
        self.conn.execute(
            "UPDATE nodes SET data = ?, version = version + 1, mtime_ms = ? WHERE path = ?",
            (bytes(data), now, path),
        )
        events.append(WatchEvent(path, "changed"))
        return Stat(row.version + 1, row.ctime_ms, now, row.owner != 0, row.num_children)

    def tx_delete(self, events: list[WatchEvent], path: str, version: int,
                  recursive: bool) -> None:
        validate_path(path)
        if path == "/":
            raise MetadataError("the root node cannot be deleted")
        row = self.row(path)
        if row is None:
            raise NoNodeError(path)
        if version != -1 and row.version != version:
            raise BadVersionError(f"{path}: version {row.version}, expected {version}")
        if row.num_children:
            if not recursive:
                raise NotEmptyError(path)
            # "/" sorts just before "0": this range is exactly the subtree below path
            below = [
                (p, parent)
                for p, parent in self.conn.execute(
                    "SELECT path, parent FROM nodes WHERE path > ? AND path < ? "
                    "ORDER BY path DESC",
                    (path + "/", path + "0"),
                )
            ]
            self.conn.execute(
                "DELETE FROM nodes WHERE path > ? AND path < ?", (path + "/", path + "0")
            )
            for p, parent in below:
                events.append(WatchEvent(p, "deleted"))
                events.append(WatchEvent(parent, "children"))
        parent = parent_path(path)
        self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self.conn.execute(
            "UPDATE nodes SET num_children = num_children - 1 WHERE path = ?", (parent,)
        )
        events.append(WatchEvent(path, "deleted"))
        events.append(WatchEvent(parent, "children"))

    def tx_check(self, path: str, version: int) -> None:
        validate_path(path)
        row = self.row(path)
        if row is None:
            raise NoNodeError(path)
        if row.version != version:
            raise BadVersionError(f"{path}: version {row.version}, expected {version}")

    def tx_multi(self, events: list[WatchEvent], ops: Sequence[Op], owner: int) -> list[OpResult]:
        results: list[OpResult] = []
        for op in ops:
            if isinstance(op, CreateOp):
                results.append(self.tx_create(
                    events, op.path, op.data, owner if op.ephemeral else 0, op.sequential, False
                ))
            elif isinstance(op, SetOp):
                results.append(self.tx_set(events, op.path, op.data, op.version))
            elif isinstance(op, DeleteOp):
                self.tx_delete(events, op.path, op.version, False)
                results.append(None)
            elif isinstance(op, CheckOp):
                self.tx_check(op.path, op.version)
                results.append(None)
            else:
                raise TypeError(f"not a metadata operation: {op!r}")
        return results

    def tx_next_id(self, events: list[WatchEvent], counter_path: str) -> int:
        row = self.row(validate_path(counter_path))
        if row is None:
            self.tx_create(events, counter_path, b"1", 0, False, True)
            return 1
        value = parse_counter(row.data) + 1
        self.tx_set(events, counter_path, str(value).encode("ascii"), row.version)
        return value

    def tx_drop_ephemerals(self, events: list[WatchEvent], owner: int | None) -> None:
        if owner is None:
            query, args = "SELECT path FROM nodes WHERE owner != ?", (0,)
        else:
            query, args = "SELECT path FROM nodes WHERE owner = ?", (owner,)
        for (path,) in self.conn.execute(query, args).fetchall():
            self.tx_delete(events, path, -1, True)

    def children(self, path: str, conn: sqlite3.Connection | None = None) -> list[str]:
        validate_path(path)
        conn = conn or self.conn
        if self.row(path, conn) is None:
            raise NoNodeError(path)
        rows = conn.execute(
            "SELECT path FROM nodes WHERE parent = ? ORDER BY path", (path,)
        ).fetchall()
        cut = 1 if path == "/" else len(path) + 1
        return sorted(p[cut:] for (p,) in rows)

    def read_row(self, path: str) -> NodeRow | None:
        """row() on the read connection (any thread; sqlite3.OperationalError when busy)."""
        assert self.read_conn is not None
        with self.read_lock:
            return self.row(path, self.read_conn)

    def read_children(self, path: str) -> list[str]:
        """children() on the read connection, in one read transaction (one snapshot)."""
        conn = self.read_conn
        assert conn is not None
        with self.read_lock:
            conn.execute("BEGIN")
            try:
                return self.children(path, conn)
            finally:
                conn.execute("COMMIT")

    # ---- dispatch (Trio thread only) ---------------------------------------------------

    def dispatch_events(self) -> None:
        while self.pending_events:
            try:
                event = self.pending_events.popleft()
            except IndexError:
                return
            for watcher in tuple(self.watchers.get(event.path, ())):
                watcher.deliver(event)

    def close_connection(self) -> None:
        with self.read_lock:
            if self.read_conn is not None:
                self.read_conn.close()
                self.read_conn = None
        self.conn.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = None


# Databases open in this process, by resolved directory or "memory:NAME".
_OPEN_TREES: dict[str, SqliteTree] = {}
_OPEN_TREES_LOCK = threading.Lock()


def open_file_tree(directory: Path) -> SqliteTree:
    make_private_dir(directory)  # the tree holds credentials (SCRAM keys, ACLs)
    lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise MetadataError(f"{directory}: metadata store is open in another process") from None
    try:
        new_file = not (directory / DB_FILE).exists()
        conn = sqlite3.connect(
            directory / DB_FILE, isolation_level=None, check_same_thread=False
        )
        db = SqliteTree(str(directory), conn, inline=False, lock_fd=lock_fd)
        try:
            db.initialise()
            # timeout 0: a busy reader gives up at once (the caller falls back, see above)
            db.read_conn = sqlite3.connect(directory / DB_FILE, isolation_level=None,
                                           check_same_thread=False, timeout=0)
            db.read_conn.execute("PRAGMA query_only=ON")
        except BaseException:
            if db.read_conn is not None:
                db.read_conn.close()
            conn.close()
            raise
        if new_file:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return db
    except sqlite3.Error as exc:
        os.close(lock_fd)
        raise MetadataError(f"{directory}: cannot open metadata database: {exc}") from exc
    except BaseException:
        os.close(lock_fd)
        raise


def acquire_tree(key: str, opener: Callable[[], SqliteTree]) -> SqliteTree:
    with _OPEN_TREES_LOCK:
        db = _OPEN_TREES.get(key)
        if db is None:
            db = opener()
            _OPEN_TREES[key] = db
        db.refcount += 1
        return db


def release_tree(db: SqliteTree) -> None:
    with _OPEN_TREES_LOCK:  # closed under it: a concurrent reopen waits for the flock's release
        db.refcount -= 1
        if db.refcount > 0:
            return
        _OPEN_TREES.pop(db.key, None)
        with db.lock:
            db.close_connection()


def memory_tree(key: str) -> SqliteTree:
    db = SqliteTree(key, sqlite3.connect(":memory:", isolation_level=None,
                                        check_same_thread=False), inline=True, lock_fd=None)
    db.initialise()
    return db


