"""The bookie's availability node in a metadata store ("memory:"), and its re-registration."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.server import (
    AVAILABLE_BOOKIES_PATH,
    BookieAddress,
    BookieRegistrationError,
    serve_bookie,
)
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import (
    MetadataStore,
    Op,
    OpResult,
    SessionBroadcaster,
    SessionState,
    Stat,
    Watcher,
)


class ExpiringStore(MetadataStore):
    """A "memory:NAME" session whose session can be LOST on demand (ephemerals go with it);
    it then continues on a fresh session, as kazoo does after an expiry."""

    def __init__(self, name: str, inner: MetadataStore) -> None:
        self.name = name
        self.inner = inner
        self.broadcaster = SessionBroadcaster(SessionState.CONNECTED)

    @classmethod
    async def open(cls, name: str) -> ExpiringStore:
        return cls(name, await open_store(f"memory:{name}"))

    async def expire(self) -> None:
        old, self.inner = self.inner, await open_store(f"memory:{self.name}")
        await old.close()  # its ephemeral nodes are gone
        self.broadcaster.publish(SessionState.LOST)
        self.broadcaster.publish(SessionState.CONNECTED)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        return await self.inner.get(path)

    async def exists(self, path: str) -> Stat | None:
        return await self.inner.exists(path)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:  # fmt: skip
        return await self.inner.create(
            path, data, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        return await self.inner.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self.inner.delete(path, version, recursive=recursive)

    async def children(self, path: str) -> list[str]:
        return await self.inner.children(path)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        return await self.inner.multi(ops)

    def watch(self, path: str, *, children: bool = False) -> Watcher:
        return self.inner.watch(path, children=children)

    def session_events(self) -> trio.abc.ReceiveChannel[SessionState]:
        return self.broadcaster.subscribe()

    async def next_id(self, counter_path: str) -> int:
        return await self.inner.next_id(counter_path)

    async def close(self) -> None:
        self.broadcaster.close()
        await self.inner.close()


async def _node(store: MetadataStore, address: BookieAddress) -> tuple[dict[str, object], Stat]:
    data, stat = await store.get(f"{AVAILABLE_BOOKIES_PATH}/{address}")
    return json.loads(data), stat


async def test_bookie_registers_and_deregisters(nursery: trio.Nursery) -> None:
    name = uuid.uuid4().hex
    async with await open_store(f"memory:{name}") as observer:
        bookie_store = await open_store(f"memory:{name}")
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[BookieAddress]) -> None:
            with scope:
                await serve_bookie(
                    MemoryBookieStorage(), bookie_store, "127.0.0.1", 0,
                    bookie_id="bk-1", task_status=task_status,
                )  # fmt: skip

        address = await nursery.start(run)
        assert await observer.children(AVAILABLE_BOOKIES_PATH) == [str(address)]
        node, stat = await _node(observer, address)
        assert node["bookie_id"] == "bk-1" and node["address"] == str(address)
        assert stat.ephemeral
        async with observer.watch(f"{AVAILABLE_BOOKIES_PATH}/{address}") as watch:
            scope.cancel()
            with trio.fail_after(5):
                async for event in watch:
                    if event.kind == "deleted":
                        break
        assert await observer.children(AVAILABLE_BOOKIES_PATH) == []
        await bookie_store.close()


async def test_bookie_registers_again_after_its_session_is_lost(nursery: trio.Nursery) -> None:
    name = uuid.uuid4().hex
    async with await open_store(f"memory:{name}") as observer:
        store = await ExpiringStore.open(name)
        address = await nursery.start(serve_bookie, MemoryBookieStorage(), store, "127.0.0.1", 0)
        path = f"{AVAILABLE_BOOKIES_PATH}/{address}"
        async with observer.watch(path) as watch:
            await store.expire()
            kinds = []
            with trio.fail_after(5):
                async for event in watch:
                    kinds.append(event.kind)
                    if event.kind == "created":
                        break
        assert "deleted" in kinds
        node, stat = await _node(observer, address)
        assert node["bookie_id"] == str(address) and stat.ephemeral
        nursery.cancel_scope.cancel()


async def test_address_held_by_another_bookie_id_is_refused() -> None:
    name = uuid.uuid4().hex
    async with (
        await open_store(f"memory:{name}") as other,
        await open_store(f"memory:{name}") as mine,
    ):
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = listener.socket.getsockname()[1]
        await listener.aclose()  # a free port, now squatted in the metadata store
        await other.create(
            f"{AVAILABLE_BOOKIES_PATH}/127.0.0.1:{port}",
            json.dumps({"bookie_id": "someone-else"}).encode(),
            ephemeral=True,
            make_parents=True,
        )
        with pytest.raises(BookieRegistrationError, match="someone-else"):
            await serve_bookie(MemoryBookieStorage(), mine, "127.0.0.1", port)


async def test_stale_node_of_the_same_bookie_is_taken_over(nursery: trio.Nursery) -> None:
    name = uuid.uuid4().hex
    async with await open_store(f"memory:{name}") as crashed_run:
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = listener.socket.getsockname()[1]
        await listener.aclose()
        await crashed_run.create(
            f"{AVAILABLE_BOOKIES_PATH}/127.0.0.1:{port}",
            json.dumps({"bookie_id": "bk-7"}).encode(),
            ephemeral=True,
            make_parents=True,
        )
        store = await open_store(f"memory:{name}")
        address = await nursery.start(
            lambda task_status: serve_bookie(
                MemoryBookieStorage(),
                store,
                "127.0.0.1",
                port,
                bookie_id="bk-7",
                task_status=task_status,
            )  # fmt: skip
        )
        node, _ = await _node(crashed_run, address)
        assert node["address"] == f"127.0.0.1:{port}"
        nursery.cancel_scope.cancel()
