"""A metadata store fixture over the embedded store and a real ZooKeeper server, for tests of
what a room keeps in the store (import `store` and `zk_server` into the test module).

`store` is parametrised: "embedded" (a directory) and "zookeeper" (a server started once per
module, each test in its own chroot, marked integration)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ledger_backend.metadata import MetadataStore, open_store
from tests.support.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=pytest.mark.integration)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    if request.param == "embedded":
        url = f"embedded:{tmp_path / 'metadata'}"
    else:
        server = request.getfixturevalue("zk_server")
        url = str(server.store_url(f"/t-{uuid.uuid4().hex[:12]}"))
    opened = await open_store(url)
    try:
        yield opened
    finally:
        await opened.close()
