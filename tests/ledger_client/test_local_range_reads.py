"""Range reads from a bookie of this process: one storage call, digests still checked, and
every doubt (a bad digest, a missing entry, a silent bookie) handled like entry-by-entry reads."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.entry_format import ENTRY_OVERHEAD_BYTES
from ledger_backend.client.errors import BKTimeoutError
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore
from tests.ledger_client.bookie_cluster import running_bookies


class RangeReadingStorage(MemoryBookieStorage):
    """The in-memory bookie plus `read_entries` (as the durable engine has), counting calls."""

    def __init__(self) -> None:
        super().__init__()
        self.range_reads = 0
        self.single_reads = 0
        self.corrupt_entry: int | None = None
        self.silent = False

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        self.single_reads += 1
        if self.silent:
            await trio.sleep_forever()
        return await super().read_entry(ledger_id, entry_id)

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.range_reads += 1
        out = [await super(RangeReadingStorage, self).read_entry(ledger_id, e)
               for e in range(first, last + 1)]  # fmt: skip
        if self.corrupt_entry is not None and first <= self.corrupt_entry <= last:
            body = bytearray(out[self.corrupt_entry - first])
            body[ENTRY_OVERHEAD_BYTES] ^= 0xFF  # flip a payload byte: the digest must catch it
            out[self.corrupt_entry - first] = bytes(body)
        return out


@pytest.fixture
async def store() -> MetadataStore:
    return await open_store("memory:")


async def test_a_local_range_is_one_storage_call(store: MetadataStore) -> None:
    storages: list[RangeReadingStorage] = []

    def make() -> RangeReadingStorage:
        storages.append(RangeReadingStorage())
        return storages[-1]

    async with running_bookies(store, 1, make_storage=make), \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        for i in range(100):
            await writer.append(b"entry-%d" % i)
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        storage = storages[0]
        singles = storage.single_reads
        assert await reader.read(0, 99) == [b"entry-%d" % i for i in range(100)]
        assert storage.range_reads == 1
        assert storage.single_reads == singles


async def test_a_bad_digest_in_a_local_range_falls_back_to_checked_reads(
    store: MetadataStore,
) -> None:
    storages: list[RangeReadingStorage] = []

    def make() -> RangeReadingStorage:
        storages.append(RangeReadingStorage())
        return storages[-1]

    async with running_bookies(store, 1, make_storage=make), \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        for i in range(20):
            await writer.append(b"entry-%d" % i)
        await writer.close()
        storages[0].corrupt_entry = 7
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        # The range's bad copy is refused; the entry-by-entry path returns the good bytes.
        assert await reader.read(0, 19) == [b"entry-%d" % i for i in range(20)]
        assert storages[0].range_reads == 1


async def test_an_ensemble_wider_than_its_write_quorum_reads_entry_by_entry(
    store: MetadataStore,
) -> None:
    storages: list[RangeReadingStorage] = []

    def make() -> RangeReadingStorage:
        storages.append(RangeReadingStorage())
        return storages[-1]

    async with running_bookies(store, 3, make_storage=make), \
            BookKeeper(store, timeout_s=5, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(3, 2, 2)
        for i in range(30):
            await writer.append(b"entry-%d" % i)
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(0, 29) == [b"entry-%d" % i for i in range(30)]
        assert all(s.range_reads == 0 for s in storages)  # no bookie holds every entry


async def test_a_silent_local_bookie_times_out(
    store: MetadataStore, autojump_clock: trio.testing.MockClock
) -> None:
    storages: list[RangeReadingStorage] = []

    def make() -> RangeReadingStorage:
        storages.append(RangeReadingStorage())
        return storages[-1]

    async with running_bookies(store, 1, make_storage=make), \
            BookKeeper(store, timeout_s=3, local_bookies=True) as bk:  # fmt: skip
        writer = await bk.create_ledger(1, 1, 1)
        await writer.append(b"only")
        await writer.append(b"two")
        storages[0].silent = True
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        started = trio.current_time()
        with pytest.raises(BKTimeoutError):
            await reader.read(0, 0)
        assert 3 <= trio.current_time() - started < 4
