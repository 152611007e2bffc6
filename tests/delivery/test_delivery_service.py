"""The delivery engine on the ledger store: every change is durable before the call returns, the
next owner reloads it (snapshots and deltas, old ledgers trimmed), a deposed owner is fenced,
and a long poll wakes when records come back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio

from gateway.delivery.delivery_service import DeliveryService, NotOwnedError
from gateway.delivery.delivery_state import AckBatch, AckError, AckType, AcquiredRange
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store

CONFIG = ManagedLedgerConfig(max_entries_per_ledger=3)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def brokers() -> AsyncIterator[Callable[[], ManagedLedgerFactory]]:
    """Makes the ledger access of one broker after another (each its own factory)."""
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        yield lambda: ManagedLedgerFactory(store, bk)


@pytest.fixture
def factory(brokers: Callable[[], ManagedLedgerFactory]) -> ManagedLedgerFactory:
    return brokers()


def service(factory: ManagedLedgerFactory, clock: FakeClock) -> DeliveryService:
    return DeliveryService(factory, CONFIG, clock=clock, snapshot_every=4)


async def acquire(svc: DeliveryService, holder: str, n: int, end: int = 100) -> list:
    return await svc.acquire("g", "t", 0, holder, n, fetchable_end=end, log_start=0, start_at=0)


def accept(first: int, last: int) -> list[AckBatch]:
    return [AckBatch(first, last, (int(AckType.ACCEPT),))]


async def test_state_survives_a_new_owner_across_snapshots(
    factory: ManagedLedgerFactory,
) -> None:
    clock = FakeClock()
    first = service(factory, clock)
    for i in range(6):
        got = await acquire(first, "a", 5)
        assert got == [AcquiredRange(i * 5, i * 5 + 4, 1)]
        result = await first.acknowledge("g", "t", 0, "a", accept(i * 5, i * 5 + 3))
        assert result.error == AckError.NONE
    held = await acquire(first, "b", 2)
    assert held == [AcquiredRange(30, 31, 1)]
    await first.close()

    second = service(factory, clock)
    view = await second.view("g", "t", 0)
    assert view is not None
    assert (view.start_offset, view.end_offset) == (4, 32)
    assert (view.acquired, view.acknowledged) == (6 + 2, 5 * 4)
    # locks held across the hand-over stay held until they expire
    assert await acquire(second, "c", 100, end=32) == []
    clock.now += 30_001
    again = await acquire(second, "c", 100, end=32)
    assert again == [
        AcquiredRange(4, 4, 2), AcquiredRange(9, 9, 2), AcquiredRange(14, 14, 2),
        AcquiredRange(19, 19, 2), AcquiredRange(24, 24, 2), AcquiredRange(29, 31, 2),
    ]  # fmt: skip
    ledger = await factory.open("__system/delivery/t-0", CONFIG)
    assert len(ledger.ledgers) <= 3, "ledgers before the latest snapshot are deleted"
    await second.close()


async def test_a_deposed_owner_cannot_persist_and_reveals_nothing(
    brokers: Callable[[], ManagedLedgerFactory],
) -> None:
    clock = FakeClock()
    old = service(brokers(), clock)
    await acquire(old, "a", 3)
    new = service(brokers(), clock)
    assert await acquire(new, "b", 3) == [AcquiredRange(3, 5, 1)]  # opening fenced `old`
    with pytest.raises(Exception):  # noqa: B017 - whichever fencing error the ledger raises
        await old.acknowledge("g", "t", 0, "a", accept(0, 2))
    assert old.loaded_groups() == {}, "the deposed owner dropped what it could not persist"
    assert (await new.acknowledge("g", "t", 0, "a", accept(0, 2))).error == AckError.NONE
    await new.close()
    await old.close()


async def test_a_partition_owned_elsewhere_is_never_opened_and_moves_with_ownership(
    brokers: Callable[[], ManagedLedgerFactory],
) -> None:
    """Cluster mode: the state lives with the partition's owner; a broker that does not own it
    refuses every call without opening (and so fencing) the log; `unload` hands it over."""
    clock = FakeClock()
    owner = {"t": "A"}
    factory_a, factory_b = brokers(), brokers()
    a = DeliveryService(factory_a, CONFIG, clock=clock, owns=lambda t, p: owner[t] == "A")
    b = DeliveryService(factory_b, CONFIG, clock=clock, owns=lambda t, p: owner[t] == "B")
    with pytest.raises(NotOwnedError):
        await acquire(b, "m2", 3)
    with pytest.raises(NotOwnedError):
        await b.acknowledge("g", "t", 0, "m2", accept(0, 0))
    assert await factory_b.list_names() == [], "nothing opened where it is not owned"
    assert await acquire(a, "m1", 3) == [AcquiredRange(0, 2, 1)]
    assert (await a.acknowledge("g", "t", 0, "m1", accept(0, 0))).error == AckError.NONE

    owner["t"] = "B"  # the bundle moves: refused at once, then unloaded by the release hook
    with pytest.raises(NotOwnedError):
        await a.acknowledge("g", "t", 0, "m1", accept(1, 1))
    assert await a.unload("t", 0) is True
    assert a.loaded_partitions() == []
    # the new owner has what was durable: 0 accepted, 1-2 still held by m1 under their lock
    assert await acquire(b, "m2", 2) == [AcquiredRange(3, 4, 1)]
    assert (await b.acknowledge("g", "t", 0, "m1", accept(1, 2))).error == AckError.NONE
    view = await b.view("g", "t", 0)
    assert view is not None and (view.start_offset, view.acquired) == (3, 2)
    await a.close()
    await b.close()


async def test_acknowledge_without_state_and_forget(factory: ManagedLedgerFactory) -> None:
    svc = service(factory, FakeClock())
    result = await svc.acknowledge("g", "t", 0, "a", accept(0, 0))
    assert result.error == AckError.INVALID_RECORD_STATE
    await acquire(svc, "a", 2)
    await svc.reset_start("g", "t", 0, 50)
    assert await acquire(svc, "a", 2) == [AcquiredRange(50, 51, 1)]
    await svc.forget("g", "t", 0)
    assert await svc.view("g", "t", 0) is None
    await svc.close()
    again = service(factory, FakeClock())
    assert await again.view("g", "t", 0) is None
    await again.close()


async def test_long_poll_wakes_on_release_and_on_lock_expiry(
    factory: ManagedLedgerFactory,
) -> None:
    clock = FakeClock()
    svc = DeliveryService(factory, CONFIG, clock=clock)
    await acquire(svc, "a", 2, end=2)
    woke: list[float] = []

    async def waiter() -> None:
        await svc.wait_for_change("t", 0, "g", 10_000)
        woke.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.01)
        release = [AckBatch(0, 0, (int(AckType.RELEASE),))]
        assert (await svc.acknowledge("g", "t", 0, "a", release)).error == AckError.NONE
    assert woke, "the release woke the waiter"
    assert await acquire(svc, "b", 5, end=2) == [AcquiredRange(0, 0, 2)]
    with trio.fail_after(5):
        clock.now += 29_999
        start = trio.current_time()
        await svc.wait_for_change("t", 0, "g", 10_000)  # the nearest lock ends in ~1 ms
        assert trio.current_time() - start < 1
    await svc.release_holder("g", "a")
    view = await svc.view("g", "t", 0)
    assert view is not None and view.available == 1
    await svc.close()


async def test_load_existing_finds_every_group_under_its_prefix(
    factory: ManagedLedgerFactory,
) -> None:
    prefix = "__system/delivery/front-x/"
    first = DeliveryService(factory, CONFIG, clock=FakeClock(), ledger_prefix=prefix)
    for partition in (0, 3):
        await first.acquire("g", "orders-eu", partition, "h", 1, fetchable_end=5, log_start=0,
                            start_at=0)
    other = DeliveryService(factory, CONFIG, clock=FakeClock(), ledger_prefix="__other/")
    await other.acquire("h", "orders-eu", 1, "h", 1, fetchable_end=5, log_start=0, start_at=0)
    await first.close()
    await other.close()
    again = DeliveryService(factory, CONFIG, clock=FakeClock(), ledger_prefix=prefix)
    assert await again.load_existing() == 2
    assert {g: sorted(tps) for g, tps in again.loaded_groups().items()} == {
        "g": [("orders-eu", 0), ("orders-eu", 3)]}
    await again.close()
