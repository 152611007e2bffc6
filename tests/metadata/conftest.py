"""Fixtures for the metadata store tests: one conformance suite over every implementation.

`open_session` opens sessions on ONE backing store per test, so a test can play several
clients: "memory" (a named in-memory database), "embedded" (a directory), "shared" (a
directory served over a unix socket by shared_server.py, as `standalone --workers N` does),
and "zookeeper" (a real server shared by the test session; each test gets its own chroot),
also with a digest identity and its ACLs ("zookeeper-acl").
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from ledger_backend.metadata import MetadataStore, open_store
from ledger_backend.metadata.shared_server import serve_shared_store
from tests.support.zookeeper import ZooKeeperServer

OpenSession = Callable[[], Awaitable[MetadataStore]]

ZK_SESSION_TIMEOUT_S = 2.0


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture(
    params=["memory", "embedded", "shared",
            pytest.param("zookeeper", marks=pytest.mark.integration),
            pytest.param("zookeeper-acl", marks=pytest.mark.integration)]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    if kind == "memory":
        return f"memory:conformance-{uuid.uuid4().hex}"
    if kind == "embedded":
        return f"embedded:{tmp_path / 'metadata'}"
    if kind == "shared":  # served by shared_server.py (started by open_session)
        return f"shared:{tmp_path / 'metadata.sock'}"
    server = request.getfixturevalue("zk_server")
    url = str(server.store_url(f"/t-{uuid.uuid4().hex[:12]}",
                               session_timeout_s=ZK_SESSION_TIMEOUT_S))
    if kind == "zookeeper-acl":  # every node for a digest identity only (zk_url.py)
        url = url.replace("zk://", "zk://cluster:conformance-pw@", 1)
    return url


@pytest.fixture
async def open_session(store_url: str, nursery: trio.Nursery) -> AsyncIterator[OpenSession]:
    opened: list[MetadataStore] = []
    if store_url.startswith("shared:"):  # a server over an embedded store, as a supervisor
        socket_path = store_url[len("shared:"):]
        directory = Path(socket_path).parent / "metadata"
        await nursery.start(serve_shared_store,
                            partial(open_store, f"embedded:{directory}"), socket_path)

    async def open_one() -> MetadataStore:
        store = await open_store(store_url)
        opened.append(store)
        return store

    yield open_one
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(open_session: OpenSession) -> MetadataStore:
    return await open_session()
