"""In-process bookie servers for ledger-client tests: real TCP on 127.0.0.1, port 0.

`running_bookies(store, n)` starts n `serve_bookie` servers (MemoryBookieStorage by default) in
a nursery, registered in `store`, and yields an `InProcessCluster` that can stop one bookie
(its cancel scope) to simulate a crash, and restart it at the same address with the storage it
had (a bookie coming back).  `silent_bookie(store, nursery)` registers one that accepts
connections and never answers.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import BookieAddress
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage_api import BookieStorage
from ledger_backend.client.errors import LedgerError
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore


@dataclass
class InProcessBookie:
    address: str
    storage: BookieStorage
    scope: trio.CancelScope


@dataclass
class InProcessCluster:
    store: MetadataStore
    nursery: trio.Nursery
    bookies: dict[str, InProcessBookie] = field(default_factory=dict)
    stopped: dict[str, InProcessBookie] = field(default_factory=dict)
    secret: BookieSecret | None = None  # every bookie authenticates its connections with it
    ssl_context: ssl.SSLContext | None = None  # every bookie serves TLS only

    async def start_bookie(self, storage: BookieStorage | None = None,
                           port: int = 0) -> InProcessBookie:  # fmt: skip
        storage = storage or MemoryBookieStorage()
        scope = trio.CancelScope()

        async def run(
            task_status: trio.TaskStatus[BookieAddress] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            with scope:
                await serve_bookie(storage, self.store, "127.0.0.1", port, drain_timeout_s=0.1,
                                   secret=self.secret, ssl_context=self.ssl_context,
                                   task_status=task_status)  # fmt: skip

        address = str(await self.nursery.start(run))
        bookie = InProcessBookie(address, storage, scope)
        self.bookies[address] = bookie
        return bookie

    async def stop_bookie(self, address: str) -> None:
        """Stop serving (connections cut, registration gone), as a crash looks to clients."""
        bookie = self.bookies.pop(address)
        bookie.scope.cancel()
        self.stopped[address] = bookie
        await trio.sleep(0.05)

    async def restart_bookie(self, address: str) -> InProcessBookie:
        """Serve a stopped bookie again at its old address, with the entries it had."""
        old = self.stopped.pop(address)
        port = int(address.rsplit(":", 1)[1])
        for _ in range(50):  # the old listener may take a moment to let go of the port
            try:
                bookie = await self.start_bookie(old.storage, port)
                break
            except OSError:
                await trio.sleep(0.1)
        else:
            raise RuntimeError(f"could not restart bookie {address}")
        assert bookie.address == address
        return bookie

    def storage(self, address: str) -> BookieStorage:
        return self.bookies[address].storage


@asynccontextmanager
async def memory_store() -> AsyncIterator[MetadataStore]:
    """A fresh in-memory metadata store, closed afterwards."""
    store = await open_store("memory:")
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def running_bookies(
    store: MetadataStore, count: int,
    make_storage: Callable[[], BookieStorage] | None = None,
    secret: BookieSecret | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[InProcessCluster]:  # fmt: skip
    async with trio.open_nursery() as nursery:
        cluster = InProcessCluster(store, nursery, secret=secret, ssl_context=ssl_context)
        for _ in range(count):
            await cluster.start_bookie(make_storage() if make_storage else None)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()


async def assert_refused(attempt: Awaitable[object], mentioning: str = "") -> None:
    """`attempt` fails with LedgerErrors only (a bookie nursery may group them), one of them
    naming `mentioning`."""
    try:
        await attempt
    except BaseException as exc:  # noqa: BLE001 - inspected below
        errors = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        assert all(isinstance(e, LedgerError) for e in errors), errors
        assert any(mentioning in str(e) for e in errors), errors
        return
    raise AssertionError("the attempt succeeded")


async def silent_bookie(store: MetadataStore, nursery: trio.Nursery) -> str:
    """Register a bookie (served in `nursery`) that accepts connections and never answers."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"

    async def swallow(stream: trio.SocketStream) -> None:
        while await stream.receive_some(65536):
            pass

    nursery.start_soon(trio.serve_listeners, swallow, listeners)
    await store.create(f"/ledgerwire/bookies/available/{address}", b"", make_parents=True)
    return address
