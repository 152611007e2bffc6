"""Bundle ownership on the in-memory metadata store (two sessions = two brokers): every bundle
gets exactly one owner, a drained broker gives all its bundles away, a joining broker takes
about its share, and a broker whose session ends loses its bundles to the survivor.  Ownership
is sticky: a broker that comes back gets its share only after the hand-back delay, one bundle
at a time; a stopping broker hands every bundle to the others at once."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from gateway.cluster.broker_registry import init_cluster, read_bundle_owners, set_draining
from gateway.cluster.bundle_placement import (
    GROUP_TOPIC,
    bundle_of,
    eligible_brokers,
    target_broker,
)
from gateway.cluster.ownership import OwnershipService
from gateway.cluster.ownership_view import ASKED_RECENTLY_S, DEPARTED_LISTING_S
from ledger_backend.metadata import open_store
from protocols.kafka.broker_api import BrokerEndpoint, OwnershipApi
from tests.cluster.memory_brokers import LAYOUT, MemoryBroker, cluster_name, wait_owners


def test_rendezvous_assignment_is_stable_and_spread() -> None:
    two = {b: target_broker(b, [1, 2]) for b in range(64)}
    three = {b: target_broker(b, [1, 2, 3]) for b in range(64)}
    # adding broker 3 moves only bundles that broker 3 wins
    assert all(three[b] in (two[b], 3) for b in range(64))
    counts = Counter(three.values())
    assert min(counts.values()) >= 10, counts
    assert target_broker(5, []) is None
    assert eligible_brokers({1, 2}, {2}) == [1]
    assert eligible_brokers({2}, {2}) == [2]  # draining the last broker keeps it serving


def test_consecutive_partitions_land_in_consecutive_bundles() -> None:
    first = bundle_of("orders", 0, 16)
    assert [bundle_of("orders", p, 16) for p in range(4)] == [(first + p) % 16 for p in range(4)]


class Broker(MemoryBroker):
    def __init__(self, node_id: int, name: str, handback_delay_s: float = 0.0) -> None:
        super().__init__(node_id, name, 9000 + node_id)
        self.handback_delay_s = handback_delay_s
        self.options: dict[str, object] = {}  # more OwnershipService options
        self.acquired: list[int] = []
        self.loaded = trio.Event()  # set: acquire hooks return (a gate a test may hold shut)
        self.loaded.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async def acquired(bundle: int) -> None:
            self.acquired.append(bundle)
            await self.loaded.wait()

        try:
            await self.run_service(task_status, on_acquired=acquired,
                                   handback_delay_s=self.handback_delay_s, **self.options)
        finally:
            with trio.CancelScope(shield=True):
                await self.store.close()


async def test_a_request_waits_while_its_bundle_loads() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one = Broker(1, name)
    one.loaded = trio.Event()  # every bundle's load hangs until the test opens the gate
    answers: list[bool] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(one.run)  # not start(): it reports started after the first loads
        await wait_owners(admin, {1})
        service = one.service
        assert service is not None
        assert service.holds_bundle(3) and not service.bundle_is_local(3)
        assert not await service.until_ready(3, 0.05)  # still loading: refused after the wait
        awaited: list[tuple[int, str, int]] = []
        service.on_awaited = lambda *unit: awaited.append(unit)
        partition = next(p for p in range(16) if bundle_of("t", p, LAYOUT.bundles) == 3)
        assert not await service.until_local("t", partition, 0.05)
        assert awaited == [(3, "t", partition)]  # the broker is told to open it at once

        answered = trio.Event()

        async def ask() -> None:
            answers.append(await service.until_ready(3, 30))
            answered.set()
        nursery.start_soon(ask)
        await trio.sleep(0.1)
        assert answers == []  # waiting, not refused
        one.loaded.set()
        with trio.fail_after(10):
            await answered.wait()
        assert answers == [True] and service.bundle_is_local(3)
        assert await service.until_ready(3, 0)  # ready: no wait
        one.scope.cancel()
    await admin.close()


async def test_a_partition_opened_while_its_bundle_loads_is_served_before_the_bundle() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one = Broker(1, name)
    one.loaded = trio.Event()  # the bundles' coordinator loads hang until the test opens it
    async with trio.open_nursery() as nursery:
        nursery.start_soon(one.run)
        await wait_owners(admin, {1})
        service = one.service
        assert service is not None
        awaited: list[tuple[int, str, int]] = []
        service.on_awaited = lambda *unit: awaited.append(unit)
        first, second = [p for p in range(40) if bundle_of("t", p, LAYOUT.bundles) == 3][:2]
        served: list[bool] = []
        answered = trio.Event()

        async def produce() -> None:
            served.append(await service.until_serving("t", first, 30))
            answered.set()
        nursery.start_soon(produce)
        await trio.sleep(0.1)
        assert served == [] and awaited == [(3, "t", first)]  # waits; the open is asked for
        service.partition_opened(3, "t", first)  # the broker opened (fenced) it
        with trio.fail_after(10):
            await answered.wait()
        assert served == [True] and service.serves_partition("t", first)
        assert not service.is_local("t", first)  # coordinators, transactions: the bundle
        assert not service.serves_partition("t", second)  # not opened yet
        assert not await service.until_serving("t", second, 0.05)
        one.loaded.set()
        assert await service.until_ready(3, 10)
        assert service.serves_partition("t", second)  # the whole bundle now
        await service.stop()  # released: nothing is served
        assert not service.serves_partition("t", first)
        service.partition_opened(3, "t", first)  # an open that ends after the release
        assert not service.serves_partition("t", first)
        one.scope.cancel()
    await admin.close()


@pytest.mark.slow
async def test_two_brokers_share_drain_and_take_over() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one, two = Broker(1, name), Broker(2, name)
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        owners = await wait_owners(admin, {1})
        assert one.service is not None and one.service.owned_bundles() == set(range(16))
        assert one.service.is_local("t", 3)
        assert one.service.coordinator_is_local(0, "group-a")

        await nursery.start(two.run)
        one.service.poke()
        owners = await wait_owners(admin, {1, 2})
        expected = {b: target_broker(b, [1, 2]) for b in range(16)}
        assert owners == expected
        assert two.service is not None
        # both views agree on who owns every partition and coordinator key
        with trio.fail_after(5):
            while one.service.owned_bundles() | two.service.owned_bundles() != set(range(16)):
                await one.service.changed.wait()
        for p in range(12):
            assert one.service.is_local("t", p) != two.service.is_local("t", p)
            assert one.service.owner_of("t", p) == two.service.owner_of("t", p)
        assert sorted(one.released) == sorted(b for b, o in expected.items() if o == 2)
        unit = one.service.coordinator_unit(0, "group-a")
        assert unit[0] == GROUP_TOPIC

        await set_draining(admin, 2, True)
        await wait_owners(admin, {1})
        await set_draining(admin, 2, False)
        await wait_owners(admin, {1, 2})

        # broker 1 "dies": its session ends, its ephemeral nodes go, broker 2 takes all
        one.scope.cancel()
        await wait_owners(admin, {2})
        assert two.service.owned_bundles() == set(range(16))
        nursery.cancel_scope.cancel()
    await admin.close()


@pytest.mark.slow
async def test_a_returning_broker_gets_bundles_back_only_by_a_delayed_hand_off() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one, two = Broker(1, name, handback_delay_s=3.0), Broker(2, name, handback_delay_s=3.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await wait_owners(admin, {1})
        assert one.service is not None
        await nursery.start(two.run)  # joins (or comes back after a crash)
        joined = trio.current_time()
        await trio.sleep(1.5)
        # nothing pulled back yet: every bundle moved at most once so far
        assert set((await read_bundle_owners(admin)).values()) == {1}
        assert one.released == []
        await wait_owners(admin, {1, 2}, timeout_s=30)
        assert trio.current_time() - joined >= 3.0
        # the hand-back moves exactly the bundles rendezvous gives broker 2, each once
        expected = {b: target_broker(b, [1, 2]) for b in range(16)}
        with trio.fail_after(30):
            while await read_bundle_owners(admin) != expected:  # noqa: ASYNC110 - polls a store
                await trio.sleep(0.05)
        assert sorted(one.released) == sorted(b for b, o in expected.items() if o == 2)

        # a stopping broker hands everything over at once, to a broker it need not wait for
        assert two.service is not None
        with trio.fail_after(10):
            await two.service.stop()
        await wait_owners(admin, {1})
        nursery.cancel_scope.cancel()
    await admin.close()


async def test_no_owner_is_named_before_the_first_reconcile() -> None:
    store = await open_store(f"memory:{cluster_name('own')}")
    await init_cluster(store, LAYOUT)
    service = OwnershipService(store, LAYOUT, BrokerEndpoint(1, "127.0.0.1", 9001),
                               session_timeout_s=10.0)
    assert service.bundle_owner(3) is None  # not "myself": routes wait for registration
    await store.close()


async def test_a_broker_that_left_stays_listed_a_while_but_leads_nothing() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one, two = Broker(1, name), Broker(2, name)
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await nursery.start(two.run)
        await wait_owners(admin, {1, 2})
        service = one.service
        assert service is not None
        with trio.fail_after(10):
            while len(service.live_brokers()) < 2:
                await service.changed.wait()
        two.scope.cancel()  # broker 2 "dies": its session ends, its nodes go
        await wait_owners(admin, {1})
        with trio.fail_after(10):
            while len(service.live_brokers()) > 1 or any(
                    service.bundle_owner(b) != service.me for b in range(LAYOUT.bundles)):
                await service.changed.wait()
        # the answer that names broker 1 leader of broker 2's partitions still lists broker 2
        assert [b.node_id for b in service.live_brokers()] == [1]
        assert [b.node_id for b in service.listed_brokers()] == [1, 2]
        later = service._clock() + DEPARTED_LISTING_S
        service._clock = lambda: later  # type: ignore[method-assign]
        assert [b.node_id for b in service.listed_brokers()] == [1]
        nursery.cancel_scope.cancel()
    await admin.close()


def test_topics_asked_about_lately_are_remembered_a_while() -> None:
    now = [100.0]
    service = OwnershipService(None, LAYOUT, BrokerEndpoint(1, "127.0.0.1", 9001),  # type: ignore[arg-type]
                               session_timeout_s=10.0, clock=lambda: now[0])
    service.note_asked(["a", "b"])
    now[0] += ASKED_RECENTLY_S / 2
    service.note_asked(["b"])
    assert service.recently_asked() == {"a", "b"}
    now[0] += ASKED_RECENTLY_S / 2 + 0.1
    assert service.recently_asked() == {"b"}


def test_the_ownership_service_answers_every_call_of_the_kafka_handlers() -> None:
    """The handlers call OwnershipApi's methods directly (no getattr with a fallback): the
    service must have each, partition-level serving included."""
    declared = {name for name in vars(OwnershipApi) if not name.startswith("_")}
    assert {"serves_partition", "until_serving", "is_local", "until_local"} <= declared
    assert declared <= set(dir(OwnershipService))


async def test_brokers_started_together_leave_each_other_their_bundles_while_they_start() -> None:
    # the workers of one `standalone --workers 2` node: the first to start does not take the
    # bundles the other wins (to hand them back one per round later); once seen live, the
    # other is never waited for again, so its death is taken over at once
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one, two = Broker(1, name, handback_delay_s=3.0), Broker(2, name, handback_delay_s=3.0)
    for broker in (one, two):
        broker.options = {"awaited_brokers": [1, 2], "await_s": 60.0}
    expected = {b: target_broker(b, [1, 2]) for b in range(16)}
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await trio.sleep(1.5)  # rounds pass: broker 1 holds only its own share
        assert await read_bundle_owners(admin) == {b: 1 for b, o in expected.items() if o == 1}
        await nursery.start(two.run)
        with trio.fail_after(30):
            while await read_bundle_owners(admin) != expected:  # noqa: ASYNC110 - polls a store
                await trio.sleep(0.05)
        assert one.released == [] and sorted(one.acquired) == sorted(
            b for b, o in expected.items() if o == 1)  # nothing moved twice
        two.scope.cancel()  # broker 2 dies: broker 1 takes its bundles without waiting
        await wait_owners(admin, {1}, timeout_s=10)
        nursery.cancel_scope.cancel()
    await admin.close()


async def test_a_broker_awaited_too_long_has_its_bundles_taken() -> None:
    name = cluster_name("own")
    admin = await open_store(f"memory:{name}")
    one = Broker(1, name)
    one.options = {"awaited_brokers": [1, 2], "await_s": 0.5}  # broker 2 never starts
    async with trio.open_nursery() as nursery:
        await nursery.start(one.run)
        await wait_owners(admin, {1}, timeout_s=10)
        nursery.cancel_scope.cancel()
    await admin.close()
