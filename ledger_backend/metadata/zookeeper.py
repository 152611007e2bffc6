"""The metadata store on a ZooKeeper ensemble, through kazoo. With zk_session.py (how a session
is opened: identity, ACL, TLS) and zk_watches.py (keeping watches armed) the only modules
importing kazoo.

Threads. kazoo is blocking and calls back from its own threads. Every request runs in
`trio.to_thread.run_sync` and waits at most `op_timeout_s` (then MetadataUnavailableError:
the request may still happen). Watch callbacks and connection-state listener callbacks never
touch Trio objects directly: they hop onto the Trio thread with `TrioToken.run_sync_soon`.

Watches (zk_watches.py). kazoo 2.11 has no persistent watches, so each Watcher keeps one-shot
watches armed: an exists-watch (created/changed/deleted) and, for children=True, a child watch.
A fired watch is re-armed from the kazoo callback thread (non-blocking *_async calls) *before*
the event reaches Trio, so a reader that re-reads after an event cannot miss a later change
(ZooKeeper answers one session's requests in order). kazoo drops all watches when the
connection drops; on reconnection every active watcher is re-armed and gets one resync event.
When the session is LOST, every watcher's iteration raises SessionExpiredError and subscribers
of session_events() get LOST; kazoo then opens a new session, so the store stays usable, but
the old session's ephemeral nodes are gone and their owners must re-create them.

Identity and ACLs. A URL naming a digest identity (zk_url.py) authenticates the session with it
(kazoo re-sends it after every reconnect; with sasl=DIGEST-MD5 kazoo runs the SASL exchange
through pure-sasl instead) and creates every znode, parents and the chroot included, with an
ACL giving that identity (digest:user:hash, or sasl:user) all permissions and nobody else any.
TLS (tls=true) wraps every connection, verified against the URL's CA file.
`secure_tree()` puts that ACL on the nodes of an existing cluster (`ledgerwire cluster secure`).

This module must never block the Trio thread, and never let a kazoo exception escape
unmapped: callers only see the errors of store.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.security import ACL

from .store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataError,
    MetadataStore,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SessionBroadcaster,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
    parse_counter,
    validate_path,
)
from .zk_session import connect, session_args, stop_client
from .zk_url import parse_zk_url, zk_identity, zk_transport
from .zk_watches import ArmedWatch

__all__ = ["PROJECT_ROOT", "ZooKeeperMetadataStore", "open_zookeeper", "parse_zk_url"]

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 10.0
DEFAULT_OP_TIMEOUT_S = 10.0
ZK_CALL_THREADS = 16
ATOMIC_TREE_DELETE_LIMIT = 1000  # larger subtrees are deleted bottom-up, not in one multi
PROJECT_ROOT = "/ledgerwire"  # every node the project creates is below it (or is the chroot)
_SECURE_PASSES = 3  # nodes created while securing are caught by the next pass


def _map_error(exc: BaseException, what: str) -> MetadataError:
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(what)
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(what)
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(what)
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(what)
    if isinstance(exc, (kz.NoAuthError, kz.AuthFailedError)):
        return MetadataError(f"{what}: ZooKeeper refused access (not this cluster's identity? "
                             "name it in the URL: zk://user:password@... or ?auth_file=)")
    if isinstance(exc, kz.ConnectionClosedError):
        return MetadataUnavailableError(f"{what}: ZooKeeper connection closed")
    if isinstance(exc, kz.SessionExpiredError):
        return SessionExpiredError(f"{what}: ZooKeeper session expired")
    if isinstance(exc, (kz.ConnectionLoss, kz.OperationTimeoutError, kz.ConnectionDropped,
                        kz.SessionMovedError, kz.RequestTimeoutError, KazooTimeoutError,
                        kz.ThrottledOpError)):
        return MetadataUnavailableError(f"{what}: {type(exc).__name__}")
    return MetadataError(f"{what}: {type(exc).__name__}: {exc}")


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(
        version=zstat.version,
        ctime_ms=zstat.ctime,
        mtime_ms=zstat.mtime,
        ephemeral=zstat.ephemeralOwner != 0,
        num_children=zstat.numChildren,
    )


class ZooKeeperMetadataStore(MetadataStore):
    """One ZooKeeper session (a started KazooClient) as a MetadataStore."""

    def __init__(self, client: KazooClient, *, op_timeout_s: float = DEFAULT_OP_TIMEOUT_S,
                 chroot: str = "") -> None:  # fmt: skip
        self.client = client
        self.chroot = chroot
        self.op_timeout_s = op_timeout_s
        self._token = trio.lowlevel.current_trio_token()
        # our own threads: calls stuck while ZooKeeper is away must not starve other users
        # of Trio's default thread pool (a bookie's fsyncs, for one)
        self._thread_limiter = trio.CapacityLimiter(ZK_CALL_THREADS)
        self._armed: dict[Watcher, ArmedWatch] = {}
        self._sessions = SessionBroadcaster(SessionState.CONNECTED)
        self._closed = False
        client.add_listener(self._on_kazoo_state)

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current session, None while disconnected."""
        return self.client.client_id  # type: ignore[no-any-return]

    # ---- thread plumbing ----------------------------------------------------------------

    def to_trio(self, fn: Callable[..., object], *args: Any) -> None:
        """Run fn(*args) on the Trio thread soon (from any thread); dropped after Trio ends."""
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    async def _call(self, what: str, fn: Callable[[], T]) -> T:
        if self._closed:
            raise MetadataError("metadata store is closed")

        def run() -> T:
            try:
                return fn()
            except (kz.KazooException, KazooTimeoutError) as exc:
                raise _map_error(exc, what) from exc

        return await trio.to_thread.run_sync(
            run, abandon_on_cancel=True, limiter=self._thread_limiter
        )

    def _wait(self, async_result: Any) -> Any:
        return async_result.get(timeout=self.op_timeout_s)

    # ---- operations ---------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        data, zstat = await self._call(path, lambda: self._wait(self.client.get_async(path)))
        return bytes(data), _stat(zstat)

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        zstat = await self._call(path, lambda: self._wait(self.client.exists_async(path)))
        return None if zstat is None else _stat(zstat)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        validate_path(path)
        if path == "/":
            raise NodeExistsError("/")

        def create() -> str:
            return self._wait(self.client.create_async(  # type: ignore[no-any-return]
                path, bytes(data), ephemeral=ephemeral, sequence=sequential,
                makepath=make_parents,
            ))

        return await self._call(path, create)

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        validate_path(path)
        zstat = await self._call(
            path, lambda: self._wait(self.client.set_async(path, bytes(data), version))
        )
        return _stat(zstat)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise MetadataError("the root node cannot be deleted")
        if recursive:
            await self._call(path, lambda: self._delete_tree(path, version))
        else:
            await self._call(path, lambda: self._wait(self.client.delete_async(path, version)))

    def _subtree(self, path: str) -> list[str]:
        """path and all nodes below it, parents before children (NoNode if path is gone)."""
        nodes, index = [path], 0
        while index < len(nodes):
            node = nodes[index]
            index += 1
            try:
                names = self._wait(self.client.get_children_async(node))
            except kz.NoNodeError:
                if node == path:
                    raise
                continue
            prefix = node.rstrip("/") + "/"
            nodes.extend(prefix + name for name in names)
        return nodes

    def _delete_tree(self, path: str, version: int) -> None:
        for _ in range(50):  # retried while writers keep adding children under path
            nodes = self._subtree(path)
            if len(nodes) <= ATOMIC_TREE_DELETE_LIMIT:
                txn = self.client.transaction()
                for node in reversed(nodes[1:]):
                    txn.delete(node)
                txn.delete(path, version)
                results = self._wait(txn.commit_async())
                failure = _first_failure(results)
                if failure is None:
                    return
                if isinstance(failure, (kz.NotEmptyError, kz.NoNodeError)) and not (
                    isinstance(failure, kz.NoNodeError) and results[-1] is failure
                ):
                    continue  # the tree changed under us: list it again
                raise failure
            # too large for one multi: bottom-up, the version of path checked first
            if version != -1:
                zstat = self._wait(self.client.exists_async(path))
                if zstat is None:
                    raise kz.NoNodeError()
                if zstat.version != version:
                    raise kz.BadVersionError()
            for node in reversed(nodes[1:]):
                try:
                    self._wait(self.client.delete_async(node))
                except (kz.NoNodeError, kz.NotEmptyError):
                    pass
            try:
                self._wait(self.client.delete_async(path, version))
                return
            except kz.NotEmptyError:
                continue
        raise kz.NotEmptyError()

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        names = await self._call(path, lambda: self._wait(self.client.get_children_async(path)))
        return sorted(names)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        ops = list(ops)
        if not ops:
            return []
        for op in ops:
            validate_path(op.path)

        def run() -> list[OpResult]:
            txn = self.client.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    txn.create(op.path, bytes(op.data), ephemeral=op.ephemeral,
                               sequence=op.sequential)
                elif isinstance(op, SetOp):
                    txn.set_data(op.path, bytes(op.data), op.version)
                elif isinstance(op, DeleteOp):
                    txn.delete(op.path, op.version)
                elif isinstance(op, CheckOp):
                    txn.check(op.path, op.version)
                else:
                    raise TypeError(f"not a metadata operation: {op!r}")
            results = self._wait(txn.commit_async())
            failure = _first_failure(results)
            if failure is not None:
                index = results.index(failure)
                raise _map_error(failure, f"multi op {index} on {ops[index].path}")
            converted: list[OpResult] = []
            for op, result in zip(ops, results, strict=True):
                if isinstance(op, CreateOp):
                    converted.append(str(result))
                elif isinstance(op, SetOp):
                    converted.append(_stat(result))
                else:
                    converted.append(None)
            return converted

        return await self._call("multi", run)

    async def next_id(self, counter_path: str) -> int:
        validate_path(counter_path)

        def increment() -> int:
            while True:  # compare-and-set loop; every lost race means another id was taken
                try:
                    data, zstat = self._wait(self.client.get_async(counter_path))
                except kz.NoNodeError:
                    try:
                        self._wait(self.client.create_async(counter_path, b"1", makepath=True))
                        return 1
                    except kz.NodeExistsError:
                        continue
                value = parse_counter(data) + 1
                try:
                    self._wait(self.client.set_async(
                        counter_path, str(value).encode("ascii"), zstat.version
                    ))
                    return value
                except kz.BadVersionError:
                    continue

        return await self._call(counter_path, increment)

    # ---- ACLs ------------------------------------------------------------------------------

    @property
    def secured(self) -> bool:
        """True when this session creates nodes for its identity only."""
        return bool(self.client.default_acl)

    async def secure_tree(self) -> int:
        """Give the chroot node and every node under /ledgerwire the identity-only ACL this
        session creates nodes with; returns how many nodes changed. MetadataError without an
        identity, or when a node refuses (it belongs to another identity)."""
        if not self.secured:
            raise MetadataError("the metadata URL names no identity to secure the cluster "
                                "with (zk://user:password@... or ?auth_file=PATH)")
        acl = list(self.client.default_acl)
        roots = (["/"] if self.chroot else []) + [PROJECT_ROOT]

        def secure() -> int:
            changed = 0
            for _ in range(_SECURE_PASSES):
                changed_now = 0
                for root in roots:
                    nodes = [root] if root == "/" else self._subtree_or_empty(root)
                    for node in nodes:
                        changed_now += self._secure_node(node, acl)
                changed += changed_now
                if not changed_now:
                    break
            return changed

        return await self._call("secure", secure)

    def _subtree_or_empty(self, root: str) -> list[str]:
        try:
            return self._subtree(root)
        except kz.NoNodeError:
            return []

    def _secure_node(self, node: str, acl: list[ACL]) -> int:
        try:
            current, _ = self._wait(self.client.get_acls_async(node))
            if sorted(map(repr, current)) == sorted(map(repr, acl)):
                return 0
            self._wait(self.client.set_acls_async(node, acl))
        except kz.NoNodeError:
            return 0  # deleted meanwhile
        return 1

    # ---- watches and sessions -----------------------------------------------------------

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        return Watcher(path, children, self._register_watcher, self._unregister_watcher)

    async def _register_watcher(self, watcher: Watcher) -> None:
        armed = ArmedWatch(self.client, self.to_trio, watcher)
        self._armed[watcher] = armed

        def arm() -> None:
            for result in armed.arm_async():
                try:
                    self._wait(result)
                except kz.NoNodeError:
                    pass  # no child watch on a missing node: the exists-watch sees it come

        await self._call(watcher.path, arm)

    def _unregister_watcher(self, watcher: Watcher) -> None:
        armed = self._armed.pop(watcher, None)
        if armed is not None:
            armed.forget()

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        return self._sessions.subscribe()

    def _on_kazoo_state(self, state: str) -> None:  # kazoo connection thread: never block
        self.to_trio(self._on_state, state)

    def _on_state(self, state: str) -> None:  # Trio thread
        if self._closed:
            return
        previous = self._sessions.state
        if state == KazooState.CONNECTED:
            if previous is SessionState.SUSPENDED:
                # kazoo dropped every watch with the connection: arm again, then resync
                for armed in list(self._armed.values()):
                    resync = WatchEvent(armed.path, "children" if armed.watcher.children
                                        else "changed")
                    armed.rearm_then_deliver(resync, exists=True, children=True)
            self._sessions.publish(SessionState.CONNECTED)
        elif state == KazooState.SUSPENDED:
            self._sessions.publish(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._sessions.publish(SessionState.LOST)
            for watcher in list(self._armed):
                watcher.fail(SessionExpiredError(f"session lost while watching {watcher.path}"))
                self._unregister_watcher(watcher)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watcher in list(self._armed):
            watcher.end()
            self._unregister_watcher(watcher)
        self._sessions.close()
        self.client.remove_listener(self._on_kazoo_state)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop_client, self.client)


def _first_failure(results: list[Any]) -> BaseException | None:
    """The exception of the op that made a kazoo transaction fail (not the rolled-back rest)."""
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures:
        if not isinstance(failure, (kz.RolledBackError, kz.RuntimeInconsistency)):
            return failure
    return failures[0] if failures else None


async def open_zookeeper(url: str) -> ZooKeeperMetadataStore:
    """Connect to the ensemble in url ("zk://h1:2181,h2:2181/chroot?session_timeout_s=10")."""
    hosts, chroot, options = parse_zk_url(url)
    identity = zk_identity(url)
    transport = zk_transport(url)
    session_timeout_s = options.get("session_timeout_s", DEFAULT_SESSION_TIMEOUT_S)
    op_timeout_s = options.get("op_timeout_s", DEFAULT_OP_TIMEOUT_S)
    connect_timeout_s = max(op_timeout_s, 1.0)
    try:
        args = session_args(identity, transport)
    except OSError as exc:  # a TLS file missing or unusable (ssl.SSLError is an OSError)
        raise MetadataError(f"ZooKeeper TLS files in the metadata URL: {exc}") from exc
    try:
        client = await trio.to_thread.run_sync(
            connect, hosts, chroot, session_timeout_s, connect_timeout_s, args
        )
    except (kz.NoAuthError, kz.AuthFailedError) as exc:
        raise _map_error(exc, f"ZooKeeper at {hosts}{chroot}") from exc
    except (kz.KazooException, KazooTimeoutError) as exc:
        raise MetadataUnavailableError(f"cannot connect to ZooKeeper at {hosts}: {exc}") from exc
    return ZooKeeperMetadataStore(client, op_timeout_s=op_timeout_s, chroot=chroot)

