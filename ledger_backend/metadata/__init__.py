"""ledger_backend/metadata: the metadata store (ZooKeeper via kazoo, or embedded sqlite).

`open_store(url)` picks the implementation from the URL; everything else imports the
interface and errors from here. This package must never be imported by protocols/.
"""

from __future__ import annotations

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
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
)

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
    "open_store",
]


async def open_store(url: str) -> MetadataStore:
    """Open a metadata store session from a URL.

    - "zk://h1:2181,h2:2181/chroot[?session_timeout_s=10&op_timeout_s=10]" -> ZooKeeper
    - "memory:" -> a fresh in-memory store; "memory:NAME" -> shared by NAME in this process
    - "embedded:/dir" or a plain directory path -> the durable embedded store in that dir
    - "shared:/path/to.sock[?session_timeout_s=N]" -> a session on a store that another local
      process serves (shared_server.py; the workers of `standalone --workers N`)
    - "embedded-ro:/dir" -> a read-only view of that dir's embedded store, without its lock
      (for readers beside a running standalone; every write raises ReadOnlyStoreError)
    """
    if url.startswith("zk://"):
        from .zookeeper import open_zookeeper

        return await open_zookeeper(url)
    if url.startswith("shared:"):
        from .shared_client import DEFAULT_SESSION_TIMEOUT_S, open_shared

        path, _, query = url[len("shared:"):].partition("?")
        timeout = DEFAULT_SESSION_TIMEOUT_S
        for item in filter(None, query.split("&")):
            key, _, value = item.partition("=")
            if key != "session_timeout_s":
                raise ValueError(f"unknown shared metadata URL option {key!r}")
            timeout = float(value)
        if not path:
            raise ValueError("metadata store URL names no socket")
        return await open_shared(path, timeout)
    if url.startswith("embedded-ro:"):
        from .embedded_readonly import open_embedded_readonly

        directory = url[len("embedded-ro:"):]
        if directory.startswith("//"):
            directory = directory[2:]
        if not directory:
            raise ValueError("metadata store URL names no directory")
        return await open_embedded_readonly(directory)
    from .embedded import open_embedded, open_memory

    if url.startswith("memory:"):
        return await open_memory(url[len("memory:"):])
    if url.startswith("embedded:"):
        url = url[len("embedded:"):]
        if url.startswith("//"):
            url = url[2:]
    if not url:
        raise ValueError("metadata store URL names no directory")
    return await open_embedded(url)
