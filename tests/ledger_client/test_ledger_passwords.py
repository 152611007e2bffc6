"""Per-ledger passwords (bookie/master_key.py, bookie/ledger_keys.py): a ledger created with a
password takes adds, fencing reads and recovery adds only with its master key; plain reads,
and ledgers without a password, are unchecked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from ledger_backend.autorecovery.fragment_copy import replicate_ledger
from ledger_backend.bookie.master_key import derive_master_key
from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    BookieAddress,
    ReadEntryRequest,
    Status,
)
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.client.ledger_metadata import LedgerMetadata, ledger_path
from ledger_backend.client.write_handle import WriteHandle
from ledger_backend.metadata import MetadataStore, open_store
from tests.bookie_server.bookie_wire_client import RawBookieClient
from tests.ledger_client.bookie_cluster import InProcessCluster, assert_refused, running_bookies

PASSWORD = b"ledger password"


async def _status(address: str, request: AddEntryRequest | ReadEntryRequest) -> Status:
    where = BookieAddress.parse(address)
    client = RawBookieClient(await trio.open_tcp_stream(where.host, where.port))
    try:
        return (await client.request(request)).status  # type: ignore[union-attr]
    finally:
        await client.aclose()


@asynccontextmanager
async def password_ledger(bookies: int, quorums: tuple[int, int, int], entries: int,
                          *, entry_mac: bool = False,
                          ) -> AsyncIterator[tuple[MetadataStore, InProcessCluster, BookKeeper,
                                                   WriteHandle]]:  # fmt: skip
    """A ledger created with PASSWORD holding `entries` entries, on in-process bookies (with
    MAC digests on its entries if entry_mac)."""
    store = await open_store("memory:")
    async with running_bookies(store, bookies) as cluster, \
            BookKeeper(store, timeout_s=2, ledger_password=PASSWORD,
                       entry_mac=entry_mac) as bk:  # fmt: skip
        writer = await bk.create_ledger(*quorums)
        for i in range(entries):
            await writer.append(b"entry-%d" % i)
        yield store, cluster, bk, writer


async def test_only_the_master_key_adds_fences_and_recovers() -> None:
    async with password_ledger(3, (3, 3, 2), 5) as (store, cluster, _, writer):
        lid = writer.ledger_id
        doc = json.loads((await store.get(ledger_path(lid)))[0])
        assert doc["password_hash"] and doc["password_salt"]
        assert PASSWORD.decode() not in json.dumps(doc)
        metadata = LedgerMetadata.from_json_bytes(json.dumps(doc).encode())
        key = derive_master_key(PASSWORD, metadata.password_salt)
        wrong = derive_master_key(b"guess", metadata.password_salt)
        bookie = next(iter(cluster.bookies))
        for request in (AddEntryRequest(1, lid, 5, 4, False, b"forged"),
                        AddEntryRequest(2, lid, 5, 4, True, b"forged", wrong),
                        ReadEntryRequest(3, lid, -1, True),
                        ReadEntryRequest(4, lid, -1, True, master_key=wrong)):  # fmt: skip
            assert await _status(bookie, request) is Status.UNAUTHORIZED
        assert not cluster.storage(bookie).is_fenced(lid)
        assert await _status(bookie, ReadEntryRequest(5, lid, 0)) is Status.OK  # plain read

        for other in (BookKeeper(store, timeout_s=2),
                      BookKeeper(store, timeout_s=2, ledger_password=b"guess")):  # fmt: skip
            async with other:
                await assert_refused(other.open_ledger(lid, recovery=True), "UNAUTHORIZED")
        await writer.append(b"entry-5")  # nobody fenced it
        async with BookKeeper(store, timeout_s=2, ledger_password=PASSWORD) as recoverer:
            handle = await recoverer.open_ledger(lid, recovery=True)
            assert await handle.read(0, 5) == [b"entry-%d" % i for i in range(6)]
        assert await _status(bookie, ReadEntryRequest(6, lid, -1, True, master_key=key)) is (
            Status.OK)  # fmt: skip


async def test_re_replication_presents_the_key() -> None:
    async with password_ledger(4, (3, 2, 2), 20) as (store, cluster, bk, writer):
        await writer.close()
        lost = writer.metadata.current_ensemble[0]
        await cluster.stop_bookie(lost)
        async with BookKeeper(store, timeout_s=2) as keyless:
            with pytest.raises(LedgerError):
                await replicate_ledger(keyless, writer.ledger_id, {lost}, fence_open=True)
        outcome = await replicate_ledger(bk, writer.ledger_id, {lost}, fence_open=True)
        assert outcome.complete and outcome.entries_copied > 0
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(0, 19) == [b"entry-%d" % i for i in range(20)]


async def test_ledgers_without_a_password_are_not_checked() -> None:
    store = await open_store("memory:")
    async with running_bookies(store, 1) as cluster, BookKeeper(store, timeout_s=2) as bk:
        writer = await bk.create_ledger(1, 1, 1)
        await writer.append(b"open")
        bookie = next(iter(cluster.bookies))
        assert await _status(bookie, AddEntryRequest(1, writer.ledger_id, 1, 0, False,
                                                     b"x")) is Status.OK  # fmt: skip


async def test_an_in_process_client_tells_its_bookies_the_new_ledgers_key() -> None:
    """A ledger created through local_bookies=True reaches its first add with the bookies'
    key check already knowing the hash (no metadata read), and still checks it."""
    store = await open_store("memory:")
    reads: list[str] = []
    plain_get = store.get

    async def counting_get(path: str):  # type: ignore[no-untyped-def]
        reads.append(path)
        return await plain_get(path)

    store.get = counting_get  # type: ignore[method-assign]
    async with running_bookies(store, 3) as cluster, \
            BookKeeper(store, timeout_s=2, ledger_password=PASSWORD,
                       local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(3, 3, 2)
        await writer.append(b"first")
        lid = writer.ledger_id
        assert ledger_path(lid) not in reads  # the bookies' check did not read it
        metadata = LedgerMetadata.from_json_bytes((await plain_get(ledger_path(lid)))[0])
        wrong = derive_master_key(b"guess", metadata.password_salt)
        for bookie in cluster.bookies:
            forged = AddEntryRequest(9, lid, 1, 0, False, b"forged", wrong)
            assert await _status(bookie, forged) is Status.UNAUTHORIZED
