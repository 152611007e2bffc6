"""Managed ledger: retention trimming, delete_ledgers_before, cursors, long polls, formats."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import (
    CursorConflictError,
    InvalidPositionError,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    MetadataFormatError,
    Position,
)
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    decode_name,
    encode_name,
    managed_ledger_path,
)
from ledger_backend.managed_ledger.retention import ledgers_past_retention
from ledger_backend.metadata import MetadataStore
from tests.managed_ledger.ml_test_support import FakeClock

ROOT = "/ledgerwire/managed-ledgers"


async def listed_ids(store: MetadataStore, name: str) -> list[int]:
    path = managed_ledger_path(ROOT, name)
    return [r.ledger_id for r in decode_managed_ledger((await store.get(path))[0], path).ledgers]


async def test_retention_by_time_deletes_old_ledgers_only(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore, clock: FakeClock
) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=5, retention_time_s=60)
    ml = await factory.open("t", config)
    for i in range(5):
        await ml.append(b"a%d" % i)  # ledger 1 (created at t0)
    clock.advance(30)
    for i in range(5):
        await ml.append(b"b%d" % i)  # ledger 2 (created at t0+30)
    clock.advance(30)
    await ml.append(b"c0")  # ledger 3 (created at t0+60), current
    l1, l2, l3 = (info.ledger_id for info in ml.ledgers)
    assert await ml.trim() == []  # ledger 1's last write (<= t0+30) is only 30 s old
    clock.advance(31)
    assert await ml.trim() == [l1]
    assert [info.ledger_id for info in ml.ledgers] == [l2, l3]
    assert await listed_ids(store, "t") == [l2, l3]
    assert l1 not in await bk.list_ledgers()
    assert ml.first_position == Position(l2, 0)
    with pytest.raises(InvalidPositionError):
        await ml.read(Position(l1, 0), 1)
    assert [e.data for e in await ml.read(Position(l2, 0), 100)] == [
        b"b0",
        b"b1",
        b"b2",
        b"b3",
        b"b4",
        b"c0",
    ]
    clock.advance(10_000)
    assert await ml.trim() == [l2]  # never the current ledger, however old
    assert [info.ledger_id for info in ml.ledgers] == [l3]
    assert await ml.read_entry(Position(l3, 0)) == b"c0"


async def test_retention_by_size(factory: ManagedLedgerFactory, bk: MemoryBookKeeper) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=2, retention_bytes=25)
    ml = await factory.open("s", config)
    for _ in range(7):
        await ml.append(b"x" * 5)  # ledgers of 10, 10, 10, 5 bytes
    ids = [info.ledger_id for info in ml.ledgers]
    assert ml.total_size == 35
    # dropping the first leaves 25 >= 25; dropping the second would leave 15 < 25
    assert await ml.trim() == [ids[0]]
    assert ml.total_size == 25
    assert await ml.trim() == []
    assert set(ids[1:]) <= set(await bk.list_ledgers())


async def test_no_retention_configured_keeps_everything(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("forever", ManagedLedgerConfig(max_entries_per_ledger=1))
    for _ in range(3):
        await ml.append(b"x")
    assert await ml.trim() == []
    assert len(ml.ledgers) == 3


async def test_delete_ledgers_before(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore
) -> None:
    ml = await factory.open("d", ManagedLedgerConfig(max_entries_per_ledger=2))
    for i in range(7):
        await ml.append(b"%d" % i)
    ids = [info.ledger_id for info in ml.ledgers]
    assert await ml.delete_ledgers_before(ids[2]) == ids[:2]
    assert await listed_ids(store, "d") == ids[2:]
    assert not set(ids[:2]) & set(await bk.list_ledgers())
    assert await ml.delete_ledgers_before(ids[-1] + 1000) == [ids[2]]  # the current one stays
    assert [info.ledger_id for info in ml.ledgers] == [ids[3]]
    assert [e.data for e in await ml.read(ml.first_position, 10)] == [b"6"]  # type: ignore[arg-type]


def test_retention_decision_stops_at_unclosed_and_current() -> None:
    from ledger_backend.managed_ledger.metadata_format import LedgerRecord

    records = [
        LedgerRecord(1, 0, 0, 0, True),
        LedgerRecord(2, 3, 30, 0, True),
        LedgerRecord(3, 3, 30, 0, False),  # still draining
        LedgerRecord(4, 0, 0, 0, False),  # current
    ]
    assert ledgers_past_retention(
        records, current_ledger_id=4, now_ms=10**9, retention_time_s=0, retention_bytes=None
    ) == [1, 2]
    assert (
        ledgers_past_retention(
            records, current_ledger_id=4, now_ms=10**9, retention_time_s=None, retention_bytes=None
        )
        == []
    )


async def test_cursors_are_durable_across_reopen(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    ml = await ManagedLedgerFactory(store, bk, clock=clock).open("c")
    positions = [await ml.append(b"%d" % i) for i in range(3)]
    cursor = await ml.open_cursor("group/a")
    assert cursor.mark_delete_position is None and cursor.properties == {}
    await cursor.mark_delete(positions[1], {"offset": 41})
    await cursor.mark_delete(positions[2])  # keeps the properties
    other = await ml.open_cursor("group b")
    await other.mark_delete(positions[0], {"x": -1})
    await ml.delete_cursor("group b")
    assert set(ml.cursors) == {"group/a"}
    await ml.close()

    ml2 = await ManagedLedgerFactory(store, bk, clock=clock).open("c")
    assert set(ml2.cursors) == {"group/a"}
    again = await ml2.open_cursor("group/a")
    assert again is ml2.cursors["group/a"]
    assert again.mark_delete_position == positions[2]
    assert again.properties == {"offset": 41}
    fresh = await ml2.open_cursor("group b")
    assert fresh.mark_delete_position is None

    # the first instance's cursor object is stale now: its CAS must fail, not overwrite
    await again.mark_delete(positions[0])
    with pytest.raises(CursorConflictError):
        await cursor.mark_delete(positions[2])
    ml3 = await ManagedLedgerFactory(store, bk, clock=clock).open("c")
    assert ml3.cursors["group/a"].mark_delete_position == positions[0]


async def test_wait_for_entries_long_poll(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("poll")
    assert not await ml.wait_for_entries(None, 0.01)
    woke: list[bool] = []

    async def waiter(after: Position | None) -> None:
        woke.append(await ml.wait_for_entries(after, 10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, None)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        first = await ml.append(b"one")
    assert woke == [True]
    assert await ml.wait_for_entries(None, 0)
    assert not await ml.wait_for_entries(first, 0.01)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, first)
        await trio.testing.wait_all_tasks_blocked()
        await ml.close()
    assert woke == [True, False]  # closing wakes the poll: no more entries will come


async def test_tail_cache_eviction_still_reads_everything(factory: ManagedLedgerFactory) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=20, tail_cache_bytes=50)
    ml = await factory.open("cache", config)
    for i in range(50):
        await ml.append(b"%02d-payload" % i)
    assert ml._cache.size_bytes <= 50 + 10  # evicted down to (about) the budget
    got = [e.data for e in await ml.read(ml.first_position, 100)]  # type: ignore[arg-type]
    assert got == [b"%02d-payload" % i for i in range(50)]


def test_name_encoding_is_one_safe_reversible_component() -> None:
    for name in ["public/default/orders-0", ".", "..", "%2F", "a b", "ünï", "x" * 300, "-_"]:
        encoded = encode_name(name)
        assert "/" not in encoded and encoded not in (".", "..")
        assert all(c.isascii() and (c.isalnum() or c in "%_-") for c in encoded)
        assert decode_name(encoded) == name
    assert encode_name("a/b") != encode_name("a%2Fb")
    every_ascii = "".join(map(chr, range(128)))  # the translate table's whole range
    assert decode_name(encode_name(every_ascii)) == every_ascii
    assert encode_name(every_ascii + "é").startswith(encode_name(every_ascii))  # same escapes
    with pytest.raises(ValueError):
        encode_name("")


async def test_unknown_metadata_format_is_refused(
    factory: ManagedLedgerFactory, store: MetadataStore
) -> None:
    ml = await factory.open("fmt")
    await ml.close()
    path = managed_ledger_path(ROOT, "fmt")
    _, stat = await store.get(path)
    await store.set(path, b'{"format": 99, "ledgers": []}', stat.version)
    with pytest.raises(MetadataFormatError):
        await factory.open("fmt")


async def test_reopen_on_a_reopened_durable_metadata_store(tmp_path, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    from ledger_backend.client.memory import MemoryLedgerCluster
    from ledger_backend.metadata import open_store

    cluster = MemoryLedgerCluster()
    store = await open_store(f"embedded:{tmp_path / 'meta'}")
    try:
        bk = MemoryBookKeeper(store, cluster=cluster)
        ml = await ManagedLedgerFactory(store, bk, clock=clock).open(
            "durable", ManagedLedgerConfig(max_entries_per_ledger=2)
        )
        positions = [await ml.append(b"%d" % i) for i in range(5)]
        cursor = await ml.open_cursor("g")
        await cursor.mark_delete(positions[3], {"epoch": 7})
        await ml.close()
    finally:
        await store.close()
    store = await open_store(f"embedded:{tmp_path / 'meta'}")
    try:
        bk = MemoryBookKeeper(store, cluster=cluster)
        ml = await ManagedLedgerFactory(store, bk, clock=clock).open("durable")
        assert [e.data for e in await ml.read(positions[0], 10)] == [b"%d" % i for i in range(5)]
        assert ml.cursors["g"].mark_delete_position == positions[3]
        assert ml.cursors["g"].properties == {"epoch": 7}
        await ml.close()
    finally:
        await store.close()
