"""The metadata store interface: a small ZooKeeper-shaped tree of versioned nodes.

Everything in ledgerwire that must agree across processes (ledger metadata, managed-ledger
ledger lists, cursors, bookie and broker registrations, id counters) lives here. Two
implementations honour this one contract: `embedded.py` (single node, sqlite, the default of
`ledgerwire standalone`, plus an in-memory twin for tests) and `zookeeper.py` (kazoo).

Semantics every implementation keeps (the conformance suite in tests/metadata checks them):

- Paths are ZooKeeper style: "/a/b", no trailing slash, no empty, "." or ".." components.
  The parent must exist unless make_parents=True. "/" always exists and cannot be deleted.
- A node's data version starts at 0 and grows by one on each set. Every write that takes a
  version is a real compare-and-set (-1 means "any version").
- Sequential creates append a zero-padded 10-digit counter that only grows per parent.
- Ephemeral nodes belong to the session of the store object that created them; they vanish
  when that store closes or its session is lost, and they cannot have children.
- multi() is all or nothing and raises the error of the first failing operation.
- Watches are persistent while their context is open and are registered before
  `__aenter__` returns, so "register, then read" never misses a change. A watch may report
  a change more than once or coalesced (readers re-read), never miss the last change. Kinds:
  children=False reports "created" / "changed" / "deleted" of the path itself; children=True
  reports "children" when the child list changes, plus "created" / "deleted" of the path.
  After a reconnection (SUSPENDED -> CONNECTED) every watcher gets one event of its kind
  ("changed" or "children") so it re-reads what it may have missed.
  When the session is LOST, the watcher's iteration raises SessionExpiredError.
  When the store closes, iteration simply ends.
- session_events() gives a new subscriber channel that first yields the current state.

This module must never do I/O or import kazoo or sqlite: it is the shared vocabulary only.
"""

from __future__ import annotations

import abc
import enum
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

import trio

__all__ = [
    "BadVersionError",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "MetadataError",
    "MetadataStore",
    "MetadataUnavailableError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "OpResult",
    "SessionExpiredError",
    "SessionState",
    "SetOp",
    "Stat",
    "WatchEvent",
    "Watcher",
    "parent_path",
    "validate_path",
]


class MetadataError(Exception):
    """Root of every metadata store error."""


class NoNodeError(MetadataError):
    """The node (or, for a create, its parent) does not exist."""


class NodeExistsError(MetadataError):
    """A create found the node already there."""


class BadVersionError(MetadataError):
    """A compare-and-set found a different version."""


class NotEmptyError(MetadataError):
    """A non-recursive delete found children."""


class SessionExpiredError(MetadataError):
    """The session is LOST: its ephemeral nodes are gone, its watches ended."""


class MetadataUnavailableError(MetadataError):
    """Connection lost or timed out; the operation may or may not have happened."""


@dataclass(frozen=True)
class Stat:
    version: int  # data version, starts at 0 on create, +1 on each set
    ctime_ms: int
    mtime_ms: int
    ephemeral: bool
    num_children: int


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True)
class WatchEvent:
    path: str
    kind: str  # "created" | "changed" | "deleted" | "children"


@dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


Op = CreateOp | SetOp | DeleteOp | CheckOp
# multi() results, one per op: CreateOp -> actual path, SetOp -> Stat, DeleteOp/CheckOp -> None
OpResult = str | Stat | None

DATA_KINDS = frozenset({"created", "changed", "deleted"})
CHILDREN_KINDS = frozenset({"created", "deleted", "children"})


def validate_path(path: str) -> str:
    """Return path if it is a valid absolute node path, else raise ValueError."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"metadata path must be an absolute string path: {path!r}")
    if path == "/":
        return path
    if path.endswith("/") or "\x00" in path:
        raise ValueError(f"invalid metadata path: {path!r}")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"invalid metadata path: {path!r}")
    return path


def parent_path(path: str) -> str:
    """"/a/b" -> "/a"; "/a" -> "/"."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def sequential_name(path: str, counter: int) -> str:
    """The actual path of a sequential create: path + 10-digit zero-padded counter."""
    return f"{path}{counter:010d}"


class Watcher:
    """One watch: `async with store.watch(p) as w: async for event in w: ...`.

    Implementations feed it from the Trio thread with deliver() / fail() / end(); the buffer is
    unbounded because events are tiny and rare, and a slow reader must never stall the store.
    """

    def __init__(
        self,
        path: str,
        children: bool,
        register: Callable[[Watcher], Awaitable[None]],
        unregister: Callable[[Watcher], None],
    ) -> None:
        self.path = validate_path(path)
        self.children = children
        self._register = register
        self._unregister = unregister
        self._send, self._receive = trio.open_memory_channel[WatchEvent | MetadataError](
            math.inf
        )
        self.active = False

    def wants(self, kind: str) -> bool:
        return kind in (CHILDREN_KINDS if self.children else DATA_KINDS)

    def deliver(self, event: WatchEvent) -> None:
        """Queue an event for the reader (ignored once the watch has ended)."""
        if self.active and self.wants(event.kind):
            try:
                self._send.send_nowait(event)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass

    def resync(self) -> None:
        """Queue the 'you may have missed something' event of this watcher's kind."""
        self.deliver(WatchEvent(self.path, "children" if self.children else "changed"))

    def fail(self, error: MetadataError) -> None:
        """End the watch with an error that the reader's iteration raises."""
        if self.active:
            self.active = False
            try:
                self._send.send_nowait(error)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            self._send.close()

    def end(self) -> None:
        """End the watch quietly (the store closed): the reader's iteration stops."""
        if self.active:
            self.active = False
            self._send.close()

    async def __aenter__(self) -> Watcher:
        self.active = True
        try:
            await self._register(self)
        except BaseException:
            self.active = False
            self._unregister(self)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.active = False
        self._unregister(self)
        self._send.close()
        self._receive.close()

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchEvent:
        try:
            item = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(item, MetadataError):
            raise item
        return item

    def receive_nowait(self) -> WatchEvent | None:
        """The next queued event, or None if none is queued (for tests and polling)."""
        try:
            item = self._receive.receive_nowait()
        except trio.WouldBlock:
            return None
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None
        if isinstance(item, MetadataError):
            raise item
        return item


class MetadataStore(abc.ABC):
    """A versioned tree of nodes with sessions, ephemeral nodes, watches and multi-op CAS."""

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat]:
        """Data and Stat of path; NoNodeError."""

    @abc.abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """Stat of path, or None if it does not exist."""

    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create path and return the actual path (differs when sequential).

        NodeExistsError; NoNodeError if the parent is missing and make_parents is False.
        """

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int) -> Stat:
        """Replace data if the version matches (-1 = any); BadVersionError, NoNodeError."""

    @abc.abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Delete path (and, if recursive, everything under it); NoNodeError, BadVersionError,
        NotEmptyError."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Sorted child names of path; NoNodeError."""

    @abc.abstractmethod
    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ops all-or-nothing; raises the error of the first failing op."""

    @abc.abstractmethod
    def watch(self, path: str, *, children: bool = False) -> Watcher:
        """A watch on path, registered when its context is entered (see the module doc)."""

    @abc.abstractmethod
    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        """A new subscriber channel of session state changes; it first yields the current
        state and is closed when the store closes."""

    @abc.abstractmethod
    async def next_id(self, counter_path: str) -> int:
        """A unique, increasing integer >= 1 from the counter node at counter_path (created,
        with its parents, on first use; its data is the last id in ASCII decimal)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session: ephemeral nodes go, watches end, subscriber channels close."""

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class SessionBroadcaster:
    """Fan-out of SessionState changes to subscriber channels (used from the Trio thread)."""

    def __init__(self, initial: SessionState) -> None:
        self.state = initial
        self._subscribers: list[trio.MemorySendChannel[SessionState]] = []
        self._closed = False

    def subscribe(self) -> trio.abc.ReceiveChannel[SessionState]:
        send, receive = trio.open_memory_channel[SessionState](math.inf)
        send.send_nowait(self.state)
        if self._closed:
            send.close()
        else:
            self._subscribers.append(send)
        return receive

    def publish(self, state: SessionState) -> None:
        self.state = state
        alive = []
        for send in self._subscribers:
            try:
                send.send_nowait(state)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                continue
            alive.append(send)
        self._subscribers = alive

    def close(self) -> None:
        self._closed = True
        for send in self._subscribers:
            send.close()
        self._subscribers = []


def parse_counter(data: bytes) -> int:
    """The value stored in a next_id counter node (empty data counts as 0)."""
    text = data.decode("ascii").strip()
    return int(text) if text else 0
