"""The in-process transport to bookies of this process gives the same outcomes as the wire."""

from __future__ import annotations

import pytest
import trio

from ledger_backend.bookie import local_bookies
from ledger_backend.client.bookie_client import LocalBookieConnection
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerFencedError
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from tests.ledger_client.bookie_cluster import running_bookies


@pytest.fixture
async def store() -> MetadataStore:
    return await open_store("memory:")


async def test_writes_reads_and_fencing_go_in_process(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, \
            BookKeeper(store, timeout_s=5, local_bookies=True) as local, \
            BookKeeper(store, timeout_s=5) as remote:  # fmt: skip
        assert all(local_bookies.lookup(a) is not None for a in cluster.bookies)
        writer = await local.create_ledger(3, 2, 2)
        acked = [await writer.append(b"entry-%d" % i) for i in range(20)]
        assert acked == list(range(20))
        # Every entry reached its write quorum on the bookies themselves.
        for address in writer.metadata.current_ensemble:
            assert cluster.storage(address).last_entry_id(writer.ledger_id) >= 18
        # A reader over TCP sees what the in-process writer wrote; its recovery fences it.
        recovered = await remote.open_ledger(writer.ledger_id, recovery=True)
        assert await recovered.read(0, 19) == [b"entry-%d" % i for i in range(20)]
        with pytest.raises(LedgerFencedError):
            await writer.append(b"after the fence")
        reader = await local.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(5, 6) == [b"entry-5", b"entry-6"]
        conn = local._ctx.pool.connection(writer.metadata.current_ensemble[0])  # type: ignore[union-attr]
        assert isinstance(conn, LocalBookieConnection)


async def test_a_stopped_bookie_is_no_longer_local(store: MetadataStore) -> None:
    async with running_bookies(store, 2) as cluster:
        address = next(iter(cluster.bookies))
        assert local_bookies.lookup(address) is not None
        await cluster.stop_bookie(address)
        await trio.sleep(0.1)
        assert local_bookies.lookup(address) is None
