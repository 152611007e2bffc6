"""Loading and unloading coordinator partitions: one coordinator task per partition owned here.

The cluster's group coordinators (group_partitions.py) and transaction coordinators
(gateway/kafka/cluster_transactions.py) work alike: a coordinator partition owned by this broker
has a store
(its own managed ledger) and a coordinator that loads from it and then runs until cancelled.
`CoordinatorPartitionLoader` is that shared lifecycle:

- `start_partition` opens the store, builds the coordinator (`_open_partition`), runs the
  subclass's `_prepare_partition` (e.g. a new coordinator epoch) and starts the coordinator in
  the broker's nursery, returning once it has loaded; a load that fails (or is cancelled)
  closes the store and raises to the caller;
- a coordinator that fails *after* loading does not take the broker down: the partition is
  unloaded and loaded again if it is still owned here (`_owns_partition`);
- `stop_partition` cancels the coordinator, waits for it to end, then closes the store
  (`stop_all`: every partition at once);
- one lock per partition orders starts and stops of the same partition.

This module must never run two coordinators for one partition, nor leave a stopped
partition's store open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import trio

from ledger_backend.faults import log_failure


class PartitionCoordinator(Protocol):
    """A coordinator as the loader runs it: `run` calls task_status.started() once loaded."""

    async def run(self, *, task_status: Any = ...) -> None: ...


class PartitionStore(Protocol):
    async def close(self) -> None: ...


CoordinatorT = TypeVar("CoordinatorT", bound=PartitionCoordinator)


@dataclass
class LoadedPartition(Generic[CoordinatorT]):
    """A partition's running coordinator, its store, and how to stop it."""

    coordinator: CoordinatorT
    store: PartitionStore
    scope: trio.CancelScope
    done: trio.Event


class _LoadStatus:
    """The task_status handed to a coordinator: records that it finished loading."""

    def __init__(self, task_status: Any) -> None:
        self._task_status = task_status
        self.loaded = False

    def started(self, value: Any = None) -> None:
        self.loaded = True
        self._task_status.started(value)


class CoordinatorPartitionLoader(Generic[CoordinatorT]):
    """Start/stop of the coordinator partitions owned here (see the module docstring).

    Subclasses set `_kind` (how logs name a partition) and `_log`, and implement
    `_open_partition` and `_owns_partition`."""

    _kind = "coordinator partition"
    _log = logging.getLogger("ledgerwire.coordinators")

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._running: dict[int, LoadedPartition[CoordinatorT]] = {}
        self._locks: dict[int, trio.Lock] = {}
        self._loading: dict[int, trio.CancelScope] = {}  # loads under way, which a stop cancels

    # --- what a subclass provides ---------------------------------------------------------------

    def _open_partition(self, partition: int) -> tuple[CoordinatorT, PartitionStore]:
        """The partition's coordinator and the store it reads and writes (not loaded yet)."""
        raise NotImplementedError

    def _owns_partition(self, partition: int) -> bool:
        """Whether this broker owns the partition now (a failed one is reloaded only then)."""
        raise NotImplementedError

    async def _prepare_partition(self, partition: int, coordinator: CoordinatorT) -> None:
        """Runs before the coordinator starts; a failure here fails the load."""

    def _loaded_log_extra(self, coordinator: CoordinatorT) -> dict[str, Any] | None:
        return None

    # --- lifecycle ------------------------------------------------------------------------------

    def loaded_partitions(self) -> set[int]:
        """The partitions whose coordinator has loaded and runs here (owned partitions whose
        load failed or is under way are not in it)."""
        return set(self._running)

    def _partition_lock(self, partition: int) -> trio.Lock:
        return self._locks.setdefault(partition, trio.Lock())

    async def start_partition(self, partition: int) -> None:
        async with self._partition_lock(partition):
            if partition in self._running:
                return
            coordinator, store = self._open_partition(partition)
            scope, done = trio.CancelScope(), trio.Event()

            async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                status = _LoadStatus(task_status)
                try:
                    with scope:
                        await coordinator.run(task_status=status)
                except Exception:
                    if not status.loaded:
                        raise  # start_partition sees it and fails
                    # failing later must not take the broker down: unload (and reload)
                    log_failure(self._log, "%s %d failed; unloading", self._kind, partition,
                                bug_level=logging.ERROR)
                    if self._running.get(partition) is not None:
                        self._nursery.start_soon(self._reload, partition)
                finally:
                    done.set()

            loading = self._loading[partition] = trio.CancelScope()
            try:
                with loading:
                    try:
                        await self._prepare_partition(partition, coordinator)
                        await self._nursery.start(run)
                    except BaseException:
                        with trio.CancelScope(shield=True):
                            await self._close_quietly(partition, store)
                        raise
            finally:
                self._loading.pop(partition, None)
            if loading.cancelled_caught:  # stopped (released) while it loaded
                self._log.info("%s %d: load stopped", self._kind, partition)
                return
            self._running[partition] = LoadedPartition(coordinator, store, scope, done)
            if done.is_set():
                # It failed after loading but before it was registered (so `run` could not
                # schedule the reload): reload now rather than look loaded with nothing running.
                self._nursery.start_soon(self._reload, partition)
                return
            self._log.info("%s %d loaded", self._kind, partition,
                           extra=self._loaded_log_extra(coordinator))

    async def stop_partition(self, partition: int) -> None:
        # A load that hangs (bookies unreachable) must not hold up the release (and with it
        # the ownership reconciliation of every bundle): cancel it, then wait for the lock.
        loading = self._loading.get(partition)
        if loading is not None:
            loading.cancel()
        async with self._partition_lock(partition):
            running = self._running.pop(partition, None)
            if running is None:
                return
            running.scope.cancel()
            await running.done.wait()
            await self._close_quietly(partition, running.store)
            self._log.info("%s %d unloaded", self._kind, partition)

    async def stop_all(self) -> None:
        """Stop every partition, side by side: each closes its own ledger, and with the
        metadata store unreachable each close waits out its timeout, which must not add up
        (a broker stopping with ZooKeeper gone took 10 s per coordinator partition)."""
        async with trio.open_nursery() as stopping:
            for partition in list(self._running):
                stopping.start_soon(self.stop_partition, partition)

    async def _reload(self, partition: int) -> None:
        await self.stop_partition(partition)
        await self._load_if_owned(partition)

    async def _load_if_owned(self, partition: int) -> None:
        if self._owns_partition(partition):
            try:
                await self.start_partition(partition)
            except Exception:
                log_failure(self._log, "reloading %s %d failed", self._kind, partition,
                            bug_level=logging.ERROR)

    async def _close_quietly(self, partition: int, store: PartitionStore) -> None:
        try:
            await store.close()
        except Exception:
            log_failure(self._log, "closing the store of %s %d failed", self._kind, partition)
