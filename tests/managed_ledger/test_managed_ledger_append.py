"""Managed ledger: appends, reads across rollovers, pipelining, restart, crash recovery, CAS."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import (
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerFencedError,
    Position,
)
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata import MetadataStore
from tests.managed_ledger.ml_test_support import FakeClock, GatedGetStore, SpyBookKeeper

NAME = "public/default/orders-0"
ROOT = "/ledgerwire/managed-ledgers"


async def read_all(ml, start: Position | None = None) -> list[bytes]:  # type: ignore[no-untyped-def]
    position = start if start is not None else ml.first_position
    if position is None:
        return []
    return [e.data for e in await ml.read(position, 1_000_000)]


async def test_appends_and_reads_across_rollovers(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=10))
    positions = [await ml.append(b"m%d" % i) for i in range(25)]
    ledger_ids = sorted({p.ledger_id for p in positions})
    assert len(ledger_ids) == 3
    assert [info.ledger_id for info in ml.ledgers] == ledger_ids
    assert [info.entries for info in ml.ledgers] == [10, 10, 5]
    assert positions == sorted(positions)
    assert positions[10] == Position(ledger_ids[1], 0)
    assert ml.last_confirmed == positions[-1]
    assert ml.first_position == positions[0]
    assert ml.number_of_entries == 25
    assert ml.total_size == sum(len(b"m%d" % i) for i in range(25))

    assert await read_all(ml) == [b"m%d" % i for i in range(25)]
    # paging with next_position crosses ledger boundaries
    got: list[bytes] = []
    position: Position | None = ml.first_position
    while position is not None:
        page = await ml.read(position, 7)
        if not page:
            break
        got.extend(e.data for e in page)
        position = ml.next_position(page[-1].position)
    assert got == [b"m%d" % i for i in range(25)]
    assert ml.next_position(positions[9]) == positions[10]
    assert await ml.read_entry(positions[13]) == b"m13"
    # a position one past a ledger's end moves to the next ledger
    page = await ml.read(Position(ledger_ids[0], 10), 2)
    assert [e.position for e in page] == positions[10:12]
    # never beyond last_confirmed
    assert await ml.read(ml.next_position(positions[-1]), 5) == []  # type: ignore[arg-type]
    with pytest.raises(InvalidPositionError):
        await ml.read_entry(Position(ledger_ids[2], 5))
    # max_bytes: stops before the entry that would exceed it, but returns at least one
    page = await ml.read(positions[0], 100, max_bytes=5)
    assert [e.data for e in page] == [b"m0", b"m1"]
    page = await ml.read(positions[0], 100, max_bytes=1)
    assert [e.data for e in page] == [b"m0"]
    await ml.close()


async def test_rollover_by_bytes_and_age(factory: ManagedLedgerFactory, clock: FakeClock) -> None:
    ml = await factory.open("by-size", ManagedLedgerConfig(max_ledger_bytes=100))
    for _ in range(5):
        await ml.append(b"x" * 40)
    # 40+40+40 >= 100 -> the 4th append goes to a new ledger
    assert [info.entries for info in ml.ledgers] == [3, 2]

    ml2 = await factory.open("by-age", ManagedLedgerConfig(max_ledger_age_s=60))
    await ml2.append(b"a")
    clock.advance(59)
    await ml2.append(b"b")
    clock.advance(2)
    await ml2.append(b"c")
    assert [info.entries for info in ml2.ledgers] == [2, 1]
    assert await read_all(ml2) == [b"a", b"b", b"c"]

    idle = await factory.open("idle", ManagedLedgerConfig(max_ledger_age_s=60))
    clock.advance(600)
    await idle.append(b"first")  # an empty ledger is not rolled over for its age
    assert [info.entries for info in idle.ledgers] == [1]


async def test_pipelined_concurrent_appends_keep_call_order(
    factory: ManagedLedgerFactory,
) -> None:
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=7))
    call_order: list[int] = []
    results: dict[int, Position] = {}

    async def append_one(i: int) -> None:
        call_order.append(i)  # no checkpoint between this and the append call
        results[i] = await ml.append(b"%d" % i)

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(append_one, i)
    positions_in_call_order = [results[i] for i in call_order]
    assert positions_in_call_order == sorted(positions_in_call_order)
    assert len(set(positions_in_call_order)) == 100
    assert await read_all(ml) == [b"%d" % i for i in call_order]
    assert len(ml.ledgers) == 15  # 100 entries, 7 per ledger
    assert all(info.entries == 7 for info in ml.ledgers[:-1])


async def test_appends_during_rollover_queue_in_order(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    spy = SpyBookKeeper(bk)
    factory = ManagedLedgerFactory(store, spy, clock=clock)  # type: ignore[arg-type]
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=2))
    first = [await ml.append(b"a"), await ml.append(b"b")]
    spy.create_gate = trio.Event()
    spy.create_started = trio.Event()
    done: list[tuple[int, Position]] = []

    async def append_one(i: int) -> None:
        done.append((i, await ml.append(b"q%d" % i)))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(append_one, i)
            await trio.testing.wait_all_tasks_blocked()
        await spy.create_started.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert done == []  # all queued behind the blocked rollover
        spy.create_gate.set()
    by_call = [p for _, p in sorted(done)]
    assert by_call == sorted(by_call)
    assert by_call[0].ledger_id > first[-1].ledger_id
    assert await read_all(ml) == [b"a", b"b"] + [b"q%d" % i for i in range(5)]


async def test_restart_keeps_data_without_recovery(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    spy = SpyBookKeeper(bk)
    factory = ManagedLedgerFactory(store, spy, clock=clock)  # type: ignore[arg-type]
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=4))
    for i in range(10):
        await ml.append(b"e%d" % i)
    last = ml.last_confirmed
    await ml.close()
    with pytest.raises(ManagedLedgerClosedError):
        await ml.append(b"late")
    assert spy.recovery_opens == []

    factory2 = ManagedLedgerFactory(store, spy, clock=clock)  # type: ignore[arg-type]
    ml2 = await factory2.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=4))
    assert spy.recovery_opens == []  # closed cleanly: nothing to recover
    assert ml2.last_confirmed == last
    assert await read_all(ml2) == [b"e%d" % i for i in range(10)]
    new_position = await ml2.append(b"after")
    assert new_position.ledger_id > last.ledger_id  # type: ignore[union-attr]
    assert await read_all(ml2) == [b"e%d" % i for i in range(10)] + [b"after"]
    await ml2.close()
    # reopening repeatedly does not pile up empty ledgers
    for _ in range(3):
        await (await factory2.open(NAME)).close()
    assert [info.entries for info in (await factory2.open(NAME)).ledgers] == [4, 4, 2, 1, 0]


async def test_reopen_after_crash_recovers_and_fences_old_writer(
    store: MetadataStore, clock: FakeClock
) -> None:
    async with MemoryBookKeeper(store) as bk_a, MemoryBookKeeper(store) as bk_b:
        spy_b = SpyBookKeeper(bk_b)
        crashed = await ManagedLedgerFactory(store, bk_a, clock=clock).open(NAME)
        for i in range(6):
            await crashed.append(b"c%d" % i)
        crashed_ledger = crashed.current_ledger_id
        # the "crashed" owner never closes; a new owner opens
        ml = await ManagedLedgerFactory(store, spy_b, clock=clock).open(NAME)  # type: ignore[arg-type]
        assert spy_b.recovery_opens == [crashed_ledger]
        assert ml.ledgers[0].ledger_id == crashed_ledger
        assert ml.ledgers[0].entries == 6
        assert await read_all(ml) == [b"c%d" % i for i in range(6)]
        handle = await bk_b.open_ledger(crashed_ledger, recovery=False)
        assert handle.is_closed and handle.metadata.last_entry_id == 5

        with pytest.raises(ManagedLedgerFencedError):
            await crashed.append(b"zombie")
        assert crashed.is_fenced
        with pytest.raises(ManagedLedgerFencedError):
            await crashed.append(b"zombie again")
        with pytest.raises(ManagedLedgerFencedError):
            await crashed.trim()

        assert await ml.append(b"new") == Position(ml.current_ledger_id, 0)
        assert await read_all(ml) == [b"c%d" % i for i in range(6)] + [b"new"]


async def test_deposed_owner_cannot_overwrite_metadata(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=1)
    old = await ManagedLedgerFactory(store, bk, clock=clock).open(NAME, config)
    await old.append(b"x")
    new = await ManagedLedgerFactory(store, bk, clock=clock).open(NAME, config)
    path = managed_ledger_path(ROOT, NAME)
    before = await store.get(path)
    # the next append needs a rollover: its CAS must fail, not overwrite the new owner's list
    with pytest.raises(ManagedLedgerFencedError):
        await old.append(b"y")
    after = await store.get(path)
    assert after == before
    assert [r.ledger_id for r in decode_managed_ledger(after[0], path).ledgers] == [
        info.ledger_id for info in new.ledgers
    ]
    assert (await new.append(b"z")).ledger_id == new.current_ledger_id


async def test_concurrent_open_from_two_factories_conflicts(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    seed = await ManagedLedgerFactory(store, bk, clock=clock).open(NAME)
    await seed.append(b"seed")
    await seed.close()
    gated = GatedGetStore(store, managed_ledger_path(ROOT, NAME), expected=2)
    outcomes: list[object] = []

    async def open_one() -> None:
        factory = ManagedLedgerFactory(gated, bk, clock=clock)  # type: ignore[arg-type]
        try:
            outcomes.append(await factory.open(NAME))
        except ManagedLedgerFencedError as exc:
            outcomes.append(exc)

    ledgers_before = set(await bk.list_ledgers())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_one)
        nursery.start_soon(open_one)
    errors = [o for o in outcomes if isinstance(o, ManagedLedgerFencedError)]
    winners = [o for o in outcomes if not isinstance(o, ManagedLedgerFencedError)]
    assert len(errors) == 1 and len(winners) == 1
    winner = winners[0]
    path = managed_ledger_path(ROOT, NAME)
    node = decode_managed_ledger((await store.get(path))[0], path)
    assert [r.ledger_id for r in node.ledgers] == [i.ledger_id for i in winner.ledgers]  # type: ignore[attr-defined]
    # the loser deleted the ledger it created
    assert set(await bk.list_ledgers()) == ledgers_before | {winner.current_ledger_id}  # type: ignore[attr-defined]
    assert await read_all(winner) == [b"seed"]


async def test_factory_caches_lists_and_deletes(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper
) -> None:
    names = ["public/default/orders-0", "a.b", ".", "..", "100%", "ünï/cödé"]
    for name in names:
        ml = await factory.open(name, ManagedLedgerConfig(max_entries_per_ledger=1))
        assert await factory.open(name) is ml
        await ml.append(name.encode())
        await ml.append(b"2")
        await ml.open_cursor("group/1")
    assert await factory.list_names() == sorted(names)
    assert await factory.exists("a.b") and not await factory.exists("a.c")
    ml = await factory.open("a.b")
    ids = [info.ledger_id for info in ml.ledgers]
    await factory.delete("a.b")
    assert ml.is_closed
    assert not await factory.exists("a.b")
    remaining = set(await bk.list_ledgers())
    assert not remaining & set(ids)
    assert await factory.list_names() == sorted(n for n in names if n != "a.b")
    reopened = await factory.open("a.b")
    assert reopened.last_confirmed is None and reopened.cursors == {}


async def test_failed_add_rolls_over_and_recovers_the_failed_ledger(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper
) -> None:
    from ledger_backend.client.errors import BKTimeoutError

    ml = await factory.open(NAME)
    await ml.append(b"ok-1")
    broken = ml.current_ledger_id
    bk.cluster.fail_appends_with = BKTimeoutError("bookies gone")
    with pytest.raises(BKTimeoutError):
        await ml.append(b"lost")
    bk.cluster.fail_appends_with = None
    position = await ml.append(b"ok-2")
    assert position.ledger_id != broken
    assert ml.ledgers[0].ledger_id == broken and ml.ledgers[0].entries == 1
    handle = await bk.open_ledger(broken, recovery=False)
    assert handle.is_closed
    assert await read_all(ml) == [b"ok-1", b"ok-2"]


async def test_close_during_rollover_fails_queued_appends_and_cleans_up(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    spy = SpyBookKeeper(bk)
    factory = ManagedLedgerFactory(store, spy, clock=clock)  # type: ignore[arg-type]
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=1))
    await ml.append(b"only")
    spy.create_gate = trio.Event()
    spy.create_started = trio.Event()
    errors: list[Exception] = []

    async def append_one() -> None:
        try:
            await ml.append(b"queued")
        except ManagedLedgerClosedError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(append_one)
        await spy.create_started.wait()
        nursery.start_soon(ml.close)
        await trio.testing.wait_all_tasks_blocked()
        spy.create_gate.set()
    assert len(errors) == 3
    # the ledger created by the interrupted rollover was deleted; the list is intact
    assert set(await bk.list_ledgers()) == {info.ledger_id for info in ml.ledgers}
    reopened = await ManagedLedgerFactory(store, bk, clock=clock).open(NAME)
    assert await read_all(reopened) == [b"only"]


async def test_crash_mid_rollover_recovers_every_unclosed_ledger(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock
) -> None:
    from ledger_backend.client.errors import LedgerFencedError
    from ledger_backend.managed_ledger.metadata_format import (
        LedgerRecord,
        ManagedLedgerNode,
        encode_managed_ledger,
    )

    # The state a crash leaves between "CAS-append the new ledger" and "close the old one":
    # two OPEN ledgers in the list, the list's counts stale.
    old_writer = await bk.create_ledger(1, 1, 1)
    new_writer = await bk.create_ledger(1, 1, 1)
    for i in range(3):
        await old_writer.append(b"old-%d" % i)
    await new_writer.append(b"new-0")
    node = ManagedLedgerNode(
        NAME,
        0,
        [
            LedgerRecord(old_writer.ledger_id, 1, 5, 0, closed=False),
            LedgerRecord(new_writer.ledger_id, 0, 0, 0, closed=False),
        ],
    )
    await store.create(
        managed_ledger_path(ROOT, NAME), encode_managed_ledger(node), make_parents=True
    )
    spy = SpyBookKeeper(bk)
    ml = await ManagedLedgerFactory(store, spy, clock=clock).open(NAME)  # type: ignore[arg-type]
    assert spy.recovery_opens == [old_writer.ledger_id, new_writer.ledger_id]
    assert [i.entries for i in ml.ledgers] == [3, 1, 0]
    assert await read_all(ml) == [b"old-0", b"old-1", b"old-2", b"new-0"]
    for writer in (old_writer, new_writer):
        with pytest.raises(LedgerFencedError):
            await writer.append(b"zombie")
    # the cursors dir is created on demand for a node written without one
    cursor = await ml.open_cursor("g")
    await cursor.mark_delete(Position(old_writer.ledger_id, 2))


class GatedRecoveryBookKeeper(SpyBookKeeper):
    """Recovery opens wait at a gate (or fail with `recovery_error`)."""

    def __init__(self, inner: MemoryBookKeeper) -> None:
        super().__init__(inner)
        self.recovery_gate = trio.Event()
        self.recovery_error: Exception | None = None

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> object:
        if recovery:
            await self.recovery_gate.wait()
            if self.recovery_error is not None:
                raise self.recovery_error
        return await super().open_ledger(ledger_id, recovery=recovery)


async def test_a_take_over_creates_its_next_ledger_while_it_recovers(
    store: MetadataStore, clock: FakeClock
) -> None:
    from ledger_backend.client.errors import LedgerRecoveryError

    async with MemoryBookKeeper(store) as bk_a, MemoryBookKeeper(store) as bk_b:
        crashed = await ManagedLedgerFactory(store, bk_a, clock=clock).open(NAME)
        await crashed.append(b"c0")
        spy = GatedRecoveryBookKeeper(bk_b)
        new_owner = ManagedLedgerFactory(store, spy, clock=clock)  # type: ignore[arg-type]
        # recovery fails: its own error comes out (no ExceptionGroup), and the ledger prepared
        # meanwhile was never created (it is created with the list that names it)
        spy.recovery_error = LedgerRecoveryError("bookies undecided")
        spy.recovery_gate.set()
        with pytest.raises(LedgerRecoveryError):
            await new_owner.open(NAME)
        assert spy.created == []
        assert await bk_b.list_ledgers() == [crashed.current_ledger_id]
        spy.recovery_error, spy.recovery_gate = None, trio.Event()
        spy.create_started = trio.Event()
        opened: list[object] = []

        async def take_over() -> None:
            opened.append(await new_owner.open(NAME))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take_over)
            with trio.fail_after(10):
                await spy.create_started.wait()  # while the recovery is still held
            spy.recovery_gate.set()
        ml = opened[0]
        assert await read_all(ml) == [b"c0"]
        assert ml.current_ledger_id == spy.created[-1]  # type: ignore[attr-defined]


async def test_a_retired_ledger_finished_in_the_background_logs_an_expected_fault_as_a_warning(
    factory: ManagedLedgerFactory, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`append_soon`'s completion finishes a retired ledger in a system task: a storage fault
    there (a bookie gone) is one WARNING line without a traceback, as everywhere else; only a
    bug gets an ERROR with its traceback.  The task never raises (that would end the run)."""
    from ledger_backend.client.errors import BookieUnavailableError

    ml = await factory.open(NAME, ManagedLedgerConfig())
    await ml.append(b"m0")
    ledger = ml._current  # noqa: SLF001 - the ledger the background task would finish

    async def fault(_ledger: object) -> None:
        raise BookieUnavailableError("bookie 127.0.0.1:3181 is not serving")

    monkeypatch.setattr(ml, "_finish_ledger", fault)
    with caplog.at_level("DEBUG"):
        await ml._finish_retired(ledger)  # noqa: SLF001
    finishing = [r for r in caplog.records if "finishing ledger" in r.getMessage()]
    assert [r.levelname for r in finishing] == ["WARNING"]
    assert finishing[0].exc_info is None

    async def bug(_ledger: object) -> None:
        raise AssertionError("a bug")

    monkeypatch.setattr(ml, "_finish_ledger", bug)
    caplog.clear()
    with caplog.at_level("DEBUG"):
        await ml._finish_retired(ledger)  # noqa: SLF001
    finishing = [r for r in caplog.records if "finishing ledger" in r.getMessage()]
    assert [r.levelname for r in finishing] == ["ERROR"]
    assert finishing[0].exc_info is not None
    monkeypatch.undo()
    await ml.close()
