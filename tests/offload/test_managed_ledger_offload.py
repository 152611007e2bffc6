"""Offloading closed ledgers of a managed ledger (memory bookies, a directory offloader):
reads stay byte-identical before and after the bookie copies go, across a reopen; trimming
deletes objects; a corrupt object is an error naming it, never wrong bytes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
)
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata import MetadataStore, open_store
from ledger_backend.offload import (
    FilesystemOffloader,
    ObjectStoreUnavailableError,
    OffloadedReadError,
)
from ledger_backend.offload.filesystem import StagedObject
from spark_bridge.topic_layout import OffloadedLedgerError, partition_layout
from tests.managed_ledger.ml_test_support import FakeClock

NAME = "public/default/tiered-0"
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=10, tail_cache_bytes=0)


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await open_store("memory:")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def bk(store: MetadataStore) -> AsyncIterator[MemoryBookKeeper]:
    async with MemoryBookKeeper(store) as client:
        yield client


def corrupt_object(directory: Path, ledger_id: int) -> Path:
    """Flip one bit inside the first block of the ledger's object; returns its path."""
    obj = next(p for p in directory.rglob("*.lwo") if f"/{ledger_id}-" in str(p))
    raw = bytearray(obj.read_bytes())
    raw[100] ^= 0x40
    obj.write_bytes(bytes(raw))
    return obj


async def offloaded_without_bookie_copies(
    store: MetadataStore, bk: MemoryBookKeeper, directory: Path
) -> tuple[ManagedLedgerFactory, ManagedLedger, list[int]]:
    """25 entries in ledgers of 10; the two closed ones offloaded, their bookie copies gone."""
    clock = FakeClock()
    factory = ManagedLedgerFactory(store, bk, clock=clock, offloader=FilesystemOffloader(directory))
    ml = await factory.open(NAME, CONFIG)
    for i in range(25):
        await ml.append(payload(i))
    done = await ml.offload()
    clock.advance(1)
    await ml.delete_offloaded_bookie_copies(0)
    return factory, ml, done


async def filled(store: MetadataStore, bk: MemoryBookKeeper, offloader: FilesystemOffloader,
                 entries: int) -> tuple[ManagedLedgerFactory, ManagedLedger]:  # fmt: skip
    """A managed ledger offloading to `offloader` with `entries` entries (ledgers of 10)."""
    factory = ManagedLedgerFactory(store, bk, offloader=offloader)
    ml = await factory.open(NAME, CONFIG)
    for i in range(entries):
        await ml.append(payload(i))
    return factory, ml


def payload(i: int) -> bytes:
    return (b"entry-%05d-" % i) * (i % 7 + 1)


async def test_offload_read_delete_reopen(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    clock = FakeClock()
    offloader = FilesystemOffloader(tmp_path / "tier")
    factory = ManagedLedgerFactory(store, bk, clock=clock, offloader=offloader)
    ml = await factory.open(NAME, CONFIG)
    for i in range(45):
        await ml.append(payload(i))
    current = ml.current_ledger_id
    done = await ml.offload()
    assert len(done) == 4 and current not in done
    assert [i.offloaded for i in ml.ledgers] == [True] * 4 + [False]
    assert await ml.offload() == []  # idempotent
    first = ml.first_position
    assert first is not None
    assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(45)]

    assert await ml.delete_offloaded_bookie_copies(60) == []  # the lag has not passed
    clock.advance(61)
    assert sorted(await ml.delete_offloaded_bookie_copies(60)) == sorted(done)
    known = set(await bk.list_ledgers())
    assert not known & set(done)
    assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(45)]
    # offloading keeps the newest bytes on bookies when asked to
    await ml.append(payload(45))
    await ml.close()

    factory2 = ManagedLedgerFactory(store, bk, clock=clock, offloader=offloader)
    ml2 = await factory2.open(NAME, CONFIG)
    assert [e.data for e in await ml2.read(first, 100)] == [payload(i) for i in range(46)]
    assert await ml2.read_entry(Position(done[2], 3)) == payload(23)
    path = managed_ledger_path("/ledgerwire/managed-ledgers", NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    keys = [r.offload.key for r in node.ledgers if r.offload is not None]
    assert len(keys) == 4 and all((tmp_path / "tier" / k).exists() for k in keys)

    # retention deletes offloaded ledgers' objects too
    ml2.config.retention_bytes = 1
    await ml2.trim()
    assert not any((tmp_path / "tier" / k).exists() for k in keys)
    await factory2.close()


async def test_keep_bytes_leaves_newest_on_bookies(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(tmp_path))
    ml = await factory.open(NAME, CONFIG)
    for _ in range(50):
        await ml.append(b"x" * 100)
    done = await ml.offload(keep_bytes=2500)  # 10 entries = 1000 bytes a ledger
    assert len(done) == 3  # 5000 -> 4000 -> 3000 -> 2000 on bookies
    await factory.close()


async def test_corrupt_object_is_an_error_naming_it(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    factory, ml, done = await offloaded_without_bookie_copies(store, bk, tmp_path)
    obj = corrupt_object(tmp_path, done[0])
    first = ml.first_position
    assert first is not None
    with caplog.at_level(logging.WARNING), pytest.raises(OffloadedReadError, match=obj.name):
        await ml.read(first, 5)
    assert obj.name in caplog.text
    # the other ledgers still read fine
    assert [e.data for e in await ml.read(Position(done[1], 0), 10)] == [
        payload(i) for i in range(10, 20)
    ]
    obj.unlink()
    with pytest.raises(OffloadedReadError, match=obj.name):
        await ml.read(first, 5)
    await factory.close()


async def test_deleting_the_managed_ledger_deletes_its_objects(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(tmp_path))
    ml = await factory.open(NAME, CONFIG)
    for i in range(25):
        await ml.append(payload(i))
    assert len(await ml.offload()) == 2
    assert count_objects(tmp_path) == 2
    await factory.delete(NAME)
    assert count_objects(tmp_path) == 0
    await factory.close()


def count_objects(directory: Path) -> int:
    return len(list(directory.rglob("*.lwo")))


def staged_bytes(directory: Path) -> list[int]:
    """The sizes of the temporary files of objects not stored (yet)."""
    return [p.stat().st_size for p in directory.rglob("*.tmp-*")]


async def test_compacting_offloaded_ledgers_deletes_their_objects(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    factory, ml, done = await offloaded_without_bookie_copies(store, bk, tmp_path)
    assert count_objects(tmp_path) == 2
    rewrite = ml.rewrite()
    for ledger_id in done:  # keep every third entry, read from the objects
        for entry in await ml.read(Position(ledger_id, 0), 10):
            if entry.position.entry_id % 3 == 0:
                await rewrite.write(entry.position, entry.data)
    await rewrite.end_run(done)
    assert await rewrite.commit() == done
    assert count_objects(tmp_path) == 0
    first = ml.first_position
    assert first is not None
    kept = [payload(i) for i in range(20) if i % 10 % 3 == 0] + [payload(i) for i in range(20, 25)]
    assert [e.data for e in await ml.read(first, 100)] == kept
    await factory.close()


async def test_older_than_offloads_ledgers_by_age(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    clock = FakeClock()
    factory = ManagedLedgerFactory(store, bk, clock=clock, offloader=FilesystemOffloader(tmp_path))
    ml = await factory.open(NAME, CONFIG)
    for i in range(35):  # ledgers of 10, one created every 100 s
        if i % 10 == 0:
            clock.advance(100)
        await ml.append(payload(i))
    closed = [info.ledger_id for info in ml.ledgers[:3]]
    assert await ml.offload(older_than_s=1000) == []
    # the first ledger's data is 200 s old (its successor was created 200 s ago), the
    # second's 100 s, the third's 0 s: its successor (the open ledger) is brand new
    assert await ml.offload(older_than_s=150) == closed[:1]
    assert await ml.offload(older_than_s=50) == closed[1:2]
    assert await ml.offload(keep_bytes=0, older_than_s=50) == closed[2:]
    await factory.close()


async def test_the_spark_bridge_refuses_offloaded_ledgers_clearly(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(tmp_path))
    ml = await factory.open("public/default/sparked-0", CONFIG)
    for i in range(25):
        await ml.append(payload(i))
    await ml.offload()
    await ml.delete_offloaded_bookie_copies(0)
    path = managed_ledger_path("/ledgerwire/managed-ledgers", "public/default/sparked-0")
    raw = (await store.get(path))[0]
    await factory.close()

    class NodeOnly:  # the slice of LedgerAccess that partition_layout reaches before reading
        closed_spans: dict[int, object] = {}

        def can_read_offloaded(self, driver: str) -> bool:
            return False  # the job named no offload store

        def get(self, wanted: str) -> bytes | None:
            return raw if wanted == path else None

    with pytest.raises(OffloadedLedgerError, match="ledgerwire.offload.directory"):
        partition_layout(NodeOnly(), "sparked", 0)  # type: ignore[arg-type]


async def test_a_store_that_is_down_only_delays_offloading(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    offloader = FlakyOffloader(tmp_path)
    factory = ManagedLedgerFactory(store, bk, offloader=offloader)
    ml = await factory.open(NAME, CONFIG)
    for i in range(25):
        await ml.append(payload(i))
    offloader.down = True
    with pytest.raises(ObjectStoreUnavailableError):
        await ml.offload()
    path = managed_ledger_path("/ledgerwire/managed-ledgers", NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    assert node.offload_pending == [] and not any(r.offload for r in node.ledgers)
    assert staged_bytes(tmp_path) == []  # the staged objects were removed
    offloader.down = False
    assert len(await ml.offload()) == 2
    assert count_objects(tmp_path) == 2
    await factory.close()


class FlakyOffloader(FilesystemOffloader):
    down = False

    async def put_group(self, objects: Sequence[tuple[str, bytes | Sequence[bytes]]]) -> None:
        if self.down:  # put() goes through here too
            raise ObjectStoreUnavailableError("store down (test)")
        await super().put_group(objects)

    async def commit_group(self, staged: Sequence[StagedObject]) -> None:
        if self.down:  # an offload's staged objects are stored here
            raise ObjectStoreUnavailableError("store down (test)")
        await super().commit_group(staged)


async def test_a_group_records_the_ledgers_before_one_that_changed_meanwhile(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    """Three ledgers stored as one group while another pass offloaded the second: the first
    is recorded, the second keeps the other pass's object, the group's uploads of the second
    and third are deleted and no key stays pending; reads stay byte-identical."""
    from ledger_backend.managed_ledger import offloading

    offloader = FilesystemOffloader(tmp_path)
    factory, ml = await filled(store, bk, offloader, 35)
    ids = [r.ledger_id for r in ml.ledgers[:3]]
    group = [await offloading._read_and_encode(ml, i) for i in ids]
    assert await offloading.offload_ledgers(ml, offloader, [ids[1]]) == [ids[1]]
    other_key = ml._records[1].offload.key  # type: ignore[union-attr]
    with pytest.raises(offloading.OffloadConflictError, match=f"ledger {ids[1]}"):
        await offloading._store_group(ml, offloader, group)  # type: ignore[arg-type]
    path = managed_ledger_path("/ledgerwire/managed-ledgers", NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    assert node.offload_pending == []
    assert [r.offload is not None for r in node.ledgers[:3]] == [True, True, False]
    assert node.ledgers[1].offload.key == other_key  # type: ignore[union-attr]
    assert count_objects(tmp_path) == 2
    first = ml.first_position
    assert first is not None
    assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(35)]
    await factory.close()


async def test_ledgers_read_at_the_same_time_are_recorded_in_order_until_an_error(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path
) -> None:
    """The first ledger's read finishes only after the second's has started (so two are read
    at the same time; a pass reading one at a time fails here), the third's read fails: the
    first two are recorded in order, the error is raised, nothing else is recorded or left
    pending, and the next pass offloads the rest."""
    import trio

    factory, ml = await filled(store, bk, FilesystemOffloader(tmp_path), 45)
    ids = [r.ledger_id for r in ml.ledgers[:4]]
    second_started = trio.Event()
    plain_read = ml._readers.read

    async def read(ledger_id: int, first: int, last: int) -> list[bytes]:
        if ledger_id == ids[0]:
            with trio.fail_after(30):
                await second_started.wait()
        elif ledger_id == ids[1]:
            second_started.set()
        elif ledger_id == ids[2]:
            raise ObjectStoreUnavailableError("bookie read failed (test)")
        return await plain_read(ledger_id, first, last)

    ml._readers.read = read  # type: ignore[method-assign]
    with pytest.raises(ObjectStoreUnavailableError, match="bookie read failed"):
        await ml.offload()
    path = managed_ledger_path("/ledgerwire/managed-ledgers", NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    assert [r.offload is not None for r in node.ledgers[:4]] == [True, True, False, False]
    assert node.offload_pending == [] and count_objects(tmp_path) == 2
    assert staged_bytes(tmp_path) == []  # the staged objects not stored are gone
    ml._readers.read = plain_read  # type: ignore[method-assign]
    assert await ml.offload() == ids[2:]
    first = ml.first_position
    assert first is not None
    assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(45)]
    await factory.close()


async def test_a_ledger_is_written_to_its_staged_file_while_it_is_still_read(
    store: MetadataStore, bk: MemoryBookKeeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pieces of one entry, the read of a ledger's last piece waits until its first
    pieces are in the temporary file (a pass that writes only after the whole read would
    wait forever); the object is stored and reads back byte-identical."""
    import trio

    from ledger_backend.managed_ledger import offloading

    monkeypatch.setattr(offloading, "_PIECE_BYTES", 1)
    written = trio.Event()
    plain_encode_into = offloading._encode_into

    def encode_into(*args: Any) -> None:  # in a worker thread
        plain_encode_into(*args)
        trio.from_thread.run_sync(written.set)

    monkeypatch.setattr(offloading, "_encode_into", encode_into)
    factory, ml = await filled(store, bk, FilesystemOffloader(tmp_path), 15)
    first_ledger = ml.ledgers[0]
    plain_read = ml._readers.read

    async def read(ledger_id: int, first: int, last: int) -> list[bytes]:
        if ledger_id == first_ledger.ledger_id and last == first_ledger.entries - 1:
            with trio.fail_after(30):
                await written.wait()
            assert sum(staged_bytes(tmp_path)) > 0  # the first pieces are on their way
        return await plain_read(ledger_id, first, last)

    ml._readers.read = read  # type: ignore[method-assign]
    assert await ml.offload() == [first_ledger.ledger_id]
    ml._readers.read = plain_read  # type: ignore[method-assign]
    await ml.delete_offloaded_bookie_copies(0)
    first = ml.first_position
    assert first is not None
    assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(15)]
    assert count_objects(tmp_path) == 1 and staged_bytes(tmp_path) == []
    await factory.close()
