"""The coordinator-partition loader shared by the cluster's group and transaction coordinators
(gateway/coordinator/partition_loader.py), and ClusterGroupCoordinator's public view of what it
loaded
(`loaded_partitions()`, `offsets`) that the admin API and retention read."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from gateway.cluster.bundle_placement import GROUP_TOPIC
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.coordinator.partition_loader import CoordinatorPartitionLoader
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CommittedOffset, CoordinatorConfig


class FakeStore:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class SlowClosingStore(FakeStore):
    """A store whose close waits out a timeout (its metadata store does not answer)."""

    async def close(self) -> None:
        await trio.sleep(10)
        self.closed = True


class FakeCoordinator:
    """Loads (or fails to), then runs until cancelled or told to fail."""

    def __init__(self, load: Any = None) -> None:
        self.load = load
        self.fail_now = trio.Event()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self.load is not None:
            await self.load()
        task_status.started()
        await self.fail_now.wait()
        raise RuntimeError("coordinator failed after loading")


class FakeLoader(CoordinatorPartitionLoader[FakeCoordinator]):
    def __init__(self, nursery: trio.Nursery, load: Any = None) -> None:
        super().__init__(nursery)
        self.load = load
        self.owned = {0, 1}
        self.opened: list[tuple[FakeCoordinator, FakeStore]] = []
        self.store_type = FakeStore

    def _open_partition(self, partition: int) -> tuple[FakeCoordinator, FakeStore]:
        pair = (FakeCoordinator(self.load), self.store_type())
        self.opened.append(pair)
        return pair

    def _owns_partition(self, partition: int) -> bool:
        return partition in self.owned


async def test_start_stop_and_a_failed_coordinator_is_reloaded_while_owned() -> None:
    async with trio.open_nursery() as nursery:
        loader = FakeLoader(nursery)
        await loader.start_partition(0)
        await loader.start_partition(0)  # already loaded: nothing new opened
        assert loader.loaded_partitions() == {0} and len(loader.opened) == 1
        first, first_store = loader.opened[0]
        first.fail_now.set()  # fails after loading: unloaded, store closed, loaded again
        await trio.testing.wait_all_tasks_blocked()
        assert first_store.closed and len(loader.opened) == 2
        assert loader.loaded_partitions() == {0}
        loader.owned = set()  # no longer owned: a failure unloads it for good
        loader.opened[1][0].fail_now.set()
        await trio.testing.wait_all_tasks_blocked()
        assert loader.loaded_partitions() == set() and loader.opened[1][1].closed
        assert len(loader.opened) == 2
        await loader.stop_all()


async def test_a_failed_or_cancelled_load_closes_its_store() -> None:
    async def broken() -> None:
        raise RuntimeError("cannot read the log")

    async with trio.open_nursery() as nursery:
        loader = FakeLoader(nursery, broken)
        with pytest.raises(RuntimeError):
            await loader.start_partition(1)
        assert loader.loaded_partitions() == set() and loader.opened[0][1].closed

        loader.load = trio.sleep_forever
        with trio.move_on_after(0.01):  # the caller gives up while the partition loads
            await loader.start_partition(1)
        assert loader.loaded_partitions() == set() and loader.opened[1][1].closed
        await loader.stop_all()


async def test_stop_all_closes_the_partitions_side_by_side(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Stopping 8 partitions whose closes each wait 10 s (virtual time) takes one wait, not 8:
    a broker stopping while ZooKeeper is gone is not held up once per partition."""
    async with trio.open_nursery() as nursery:
        loader = FakeLoader(nursery)
        loader.owned = set(range(8))
        loader.store_type = SlowClosingStore
        for partition in range(8):
            await loader.start_partition(partition)
        started = trio.current_time()
        await loader.stop_all()
        assert trio.current_time() - started < 20
        assert loader.loaded_partitions() == set()
        assert all(store.closed for _, store in loader.opened)


class TwoPartitionOwnership:
    """Groups starting with "a" are in coordinator partition 0, the others in 1."""

    def __init__(self) -> None:
        self.local = {0, 1}

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        return GROUP_TOPIC, 0 if key.startswith("a") else 1

    def is_local(self, topic: str, partition: int) -> bool:
        return topic == GROUP_TOPIC and partition in self.local


async def test_group_coordinator_lists_loaded_partitions_and_committed_offsets() -> None:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bookkeeper, trio.open_nursery() as nursery:
            ownership = TwoPartitionOwnership()
            groups = ClusterGroupCoordinator(
                ManagedLedgerFactory(store, bookkeeper), None, ownership,  # type: ignore[arg-type]
                nursery, CoordinatorConfig())
            assert groups.loaded_partitions() == set() and groups.offsets == {}
            await groups.start_partition(0)
            await groups.start_partition(1)
            assert groups.loaded_partitions() == {0, 1}
            for group_id, offset in (("alpha", 5), ("beta", 7)):
                await groups.commit_offsets(group_id=group_id, member_id="", generation_id=-1,
                                            offsets={("t", 0): CommittedOffset(offset)})
            assert {g: {k: c.offset for k, c in o.items()}
                    for g, o in groups.offsets.items()} == {"alpha": {("t", 0): 5},
                                                            "beta": {("t", 0): 7}}
            ownership.local = {1}  # partition 0 is being released: its groups are left out
            assert set(groups.offsets) == {"beta"}
            await groups.stop_partition(0)
            assert groups.loaded_partitions() == {1}
            await groups.stop_all()
            assert groups.loaded_partitions() == set() and groups.offsets == {}
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


class EarlyFailingCoordinator:
    runs = 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        EarlyFailingCoordinator.runs += 1
        task_status.started()
        if EarlyFailingCoordinator.runs == 1:
            raise RuntimeError("first housekeeping pass failed")
        await trio.sleep_forever()


class CountingStore:
    closed = 0

    async def close(self) -> None:
        CountingStore.closed += 1


class EarlyFailureLoader(CoordinatorPartitionLoader[EarlyFailingCoordinator]):
    def _open_partition(self, partition: int) -> tuple[EarlyFailingCoordinator, CountingStore]:
        return EarlyFailingCoordinator(), CountingStore()

    def _owns_partition(self, partition: int) -> bool:
        return True


async def test_a_coordinator_failing_right_after_loading_is_reloaded() -> None:
    async with trio.open_nursery() as nursery:
        loader = EarlyFailureLoader(nursery)
        await loader.start_partition(0)
        await trio.testing.wait_all_tasks_blocked()
        running = loader._running.get(0)
        assert running is not None and not running.done.is_set()
        try:
            assert EarlyFailingCoordinator.runs == 2, "the failed coordinator was not reloaded"
        finally:
            nursery.cancel_scope.cancel()


async def test_stopping_a_partition_cancels_a_hung_load() -> None:
    """A load stuck on unreachable bookies must not hold up the release (and with it the
    ownership reconciliation of every bundle): stop cancels it and the store is closed."""
    async with trio.open_nursery() as nursery:
        loader = FakeLoader(nursery, trio.sleep_forever)
        nursery.start_soon(loader.start_partition, 0)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await loader.stop_partition(0)
        await trio.testing.wait_all_tasks_blocked()
        assert loader.loaded_partitions() == set()
        assert [store.closed for _, store in loader.opened] == [True]
        nursery.cancel_scope.cancel()
