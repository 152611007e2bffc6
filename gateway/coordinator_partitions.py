"""Group coordination in a cluster: one GroupCoordinator per owned coordinator partition.

A group id belongs to coordinator partition crc32(id) mod N ("__consumer_offsets", i); each
partition keeps its committed offsets in its own managed ledger
("__system/offsets/__consumer_offsets-<i>"), so whoever owns the partition owns the group:
acquiring it opens that ledger (fencing the previous owner's, as for any partition) and loads
the offsets; releasing it stops the coordinator and closes the ledger.  Members of a moved
group rejoin (they get NOT_COORDINATOR, look the coordinator up again and join the new one),
as in Kafka after a coordinator failover; committed offsets move with the ledger.

`ClusterGroupCoordinator` has the GroupCoordinator methods the handlers call and routes each
to the local coordinator of the group's partition, or raises NOT_COORDINATOR.

This module must never serve a group whose partition this broker does not own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from gateway.offset_store import KAFKA_OFFSETS_LEDGER, LedgerOffsetStore
from gateway.ownership import GROUP_TOPIC, OwnershipService
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.managed_ledger.types import (
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from protocols.kafka.errors import ErrorCode
from protocols.kafka.group_coordinator import (
    CommittedOffset,
    CoordinatorConfig,
    Group,
    GroupCoordinator,
    GroupError,
    OffsetKey,
)

log = logging.getLogger("ledgerwire.coordinators")


@dataclass
class _Running:
    coordinator: GroupCoordinator
    store: LedgerOffsetStore
    scope: trio.CancelScope
    done: trio.Event


class ClusterGroupCoordinator:
    """The group coordinators of the coordinator partitions this broker owns."""

    def __init__(self, factory: ManagedLedgerFactory, ledger_config: ManagedLedgerConfig,
                 ownership: OwnershipService, nursery: trio.Nursery,
                 coordinator_config: CoordinatorConfig | None = None) -> None:
        self._factory = factory
        self._ledger_config = ledger_config
        self._ownership = ownership
        self._nursery = nursery
        self._coordinator_config = coordinator_config
        self._running: dict[int, _Running] = {}
        self._locks: dict[int, trio.Lock] = {}

    # --- partition lifecycle (ownership hooks) ------------------------------------------------

    async def start_partition(self, partition: int) -> None:
        async with self._locks.setdefault(partition, trio.Lock()):
            if partition in self._running:
                return
            store = LedgerOffsetStore(self._factory, self._ledger_config,
                                      ledger_name=f"{KAFKA_OFFSETS_LEDGER}-{partition}")
            coordinator = GroupCoordinator(store, self._coordinator_config)
            scope = trio.CancelScope()
            done = trio.Event()

            async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                started = False

                def mark_started(value: Any = None) -> None:
                    nonlocal started
                    started = True
                    task_status.started(value)

                status = _Status(mark_started)
                try:
                    with scope:
                        await coordinator.run(task_status=status)
                except Exception:
                    if not started:
                        raise  # the loader sees it: start_partition fails
                    # a coordinator failing later must not take the broker down: unload it
                    log.exception("coordinator partition %d failed; unloading", partition)
                    if self._running.get(partition) is not None:
                        self._nursery.start_soon(self._reload, partition)
                finally:
                    done.set()

            try:
                await self._nursery.start(run)
            except Exception:
                with trio.CancelScope(shield=True):
                    await _close_quietly(store)
                raise
            self._running[partition] = _Running(coordinator, store, scope, done)
            log.info("coordinator partition %d loaded", partition)

    async def stop_partition(self, partition: int) -> None:
        async with self._locks.setdefault(partition, trio.Lock()):
            running = self._running.pop(partition, None)
            if running is None:
                return
            running.scope.cancel()
            await running.done.wait()
            await _close_quietly(running.store)
            log.info("coordinator partition %d unloaded", partition)

    async def stop_all(self) -> None:
        for partition in list(self._running):
            await self.stop_partition(partition)

    # --- routing ------------------------------------------------------------------------------

    def _for(self, group_id: str) -> GroupCoordinator:
        topic, partition = self._ownership.coordinator_unit(0, group_id)
        assert topic == GROUP_TOPIC
        running = self._running.get(partition)
        if running is None or not self._ownership.is_local(topic, partition):
            raise GroupError(ErrorCode.NOT_COORDINATOR,
                             f"group {group_id!r} is coordinated by another broker")
        return running.coordinator

    @property
    def consumer_groups(self) -> _ConsumerGroupsRouter:
        """The KIP-848 consumer-group side of each coordinator, routed the same way."""
        return _ConsumerGroupsRouter(self)

    def __getattr__(self, name: str) -> Any:
        """Any other coordinator method whose first argument (or `group_id=`) is a group id."""
        if name.startswith("_"):
            raise AttributeError(name)
        return _routed(self, name, lambda c: c)

    async def join(self, **kwargs: Any) -> dict[str, Any]:
        return await self._for(kwargs["group_id"]).join(**kwargs)

    async def sync(self, **kwargs: Any) -> tuple[str | None, str | None, bytes]:
        return await self._for(kwargs["group_id"]).sync(**kwargs)

    def heartbeat(self, **kwargs: Any) -> None:
        self._for(kwargs["group_id"]).heartbeat(**kwargs)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        return self._for(group_id).leave(group_id, members)

    async def _writing(self, group_id: str, call: Any) -> None:
        """Run a call that writes the offsets ledger; a fenced ledger (auto-recovery fenced an
        idle ledger on a lost bookie, or a new owner took it) reloads the partition and the
        client is told NOT_COORDINATOR so it retries."""
        try:
            await call(self._for(group_id))
        except (ManagedLedgerFencedError, ManagedLedgerClosedError) as exc:
            _, partition = self._ownership.coordinator_unit(0, group_id)
            self._nursery.start_soon(self._reload, partition)
            raise GroupError(ErrorCode.NOT_COORDINATOR, f"offsets ledger fenced: {exc}") from exc
        self._for(group_id)  # still the coordinator (lease valid) when answering, or refuse

    async def _reload(self, partition: int) -> None:
        await self.stop_partition(partition)
        if self._ownership.is_local(GROUP_TOPIC, partition):
            try:
                await self.start_partition(partition)
            except Exception:
                log.exception("reloading coordinator partition %d failed", partition)

    async def commit_offsets(self, **kwargs: Any) -> None:
        await self._writing(kwargs["group_id"], lambda c: c.commit_offsets(**kwargs))

    async def apply_transactional_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        await self._writing(group_id, lambda c: c.apply_transactional_offsets(group_id, offsets))

    def fetch_offsets(self, group_id: str,
                      keys: list[OffsetKey] | None) -> dict[OffsetKey, CommittedOffset]:
        return self._for(group_id).fetch_offsets(group_id, keys)

    async def delete_offsets(self, group_id: str, keys: list[OffsetKey]) -> None:
        await self._writing(group_id, lambda c: c.delete_offsets(group_id, keys))

    def known_group_ids(self) -> list[str]:
        ids: set[str] = set()
        for running in self._running.values():
            ids.update(running.coordinator.known_group_ids())
        return sorted(ids)

    def describe(self, group_id: str) -> Group | None:
        return self._for(group_id).describe(group_id)

    async def delete_group(self, group_id: str) -> None:
        await self._writing(group_id, lambda c: c.delete_group(group_id))


class _Status:
    """A task_status that records that the coordinator finished loading."""

    def __init__(self, started: Any) -> None:
        self.started = started


def _routed(router: ClusterGroupCoordinator, name: str, part: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        group_id = kwargs["group_id"] if "group_id" in kwargs else (args[0] if args else None)
        if not isinstance(group_id, str):
            raise AttributeError(f"{name}: cannot route a call without a group id")
        return getattr(part(router._for(group_id)), name)(*args, **kwargs)

    return call


class _ConsumerGroupsRouter:
    def __init__(self, router: ClusterGroupCoordinator) -> None:
        self._router = router

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _routed(self._router, name, lambda c: c.consumer_groups)


async def _close_quietly(store: LedgerOffsetStore) -> None:
    try:
        await store.close()
    except Exception:
        log.warning("closing an offsets ledger failed", exc_info=True)
