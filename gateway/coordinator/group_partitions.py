"""Group coordination in a cluster: one GroupCoordinator per owned coordinator partition.

A group id belongs to coordinator partition crc32(id) mod N ("__consumer_offsets", i); each
partition keeps its committed offsets in its own managed ledger
("__system/offsets/__consumer_offsets-<i>"), so whoever owns the partition owns the group:
acquiring it opens that ledger (fencing the previous owner's, as for any partition) and loads
the offsets and the groups' metadata; releasing it stops the coordinator and closes the
ledger.  Members of a moved group get NOT_COORDINATOR, look the coordinator up again and
carry on with the new one (same member ids, generations and assignments, loaded from the
ledger), as in Kafka after a coordinator failover.

`ClusterGroupCoordinator` has the GroupCoordinator methods the handlers call and routes each
to the local coordinator of the group's partition, or raises NOT_COORDINATOR.  Loading and
unloading partitions is partition_loader.py's (shared with the transaction coordinators);
`loaded_partitions()` and `offsets` are what the admin API and retention read.

This module must never serve a group whose partition this broker does not own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from gateway.cluster.bundle_placement import GROUP_TOPIC
from gateway.cluster.ownership import OwnershipService
from gateway.coordinator.offset_store import LedgerOffsetStore, group_ledger_name
from gateway.coordinator.partition_loader import CoordinatorPartitionLoader
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


class ClusterGroupCoordinator(CoordinatorPartitionLoader[GroupCoordinator]):
    """The group coordinators of the coordinator partitions this broker owns."""

    _kind = "coordinator partition"
    _log = log

    def __init__(self, factory: ManagedLedgerFactory, ledger_config: ManagedLedgerConfig,
                 ownership: OwnershipService, nursery: trio.Nursery,
                 coordinator_config: CoordinatorConfig | None = None) -> None:
        super().__init__(nursery)
        self._factory = factory
        self._ledger_config = ledger_config
        self._ownership = ownership
        self._coordinator_config = coordinator_config

    # --- partition lifecycle (ownership hooks; partition_loader.py) ---------------------------

    def _open_partition(self, partition: int) -> tuple[GroupCoordinator, LedgerOffsetStore]:
        store = LedgerOffsetStore(self._factory, self._ledger_config,
                                  ledger_name=group_ledger_name(partition))
        return GroupCoordinator(store, self._coordinator_config), store

    def _owns_partition(self, partition: int) -> bool:
        return self._ownership.is_local(GROUP_TOPIC, partition)

    # --- what the admin API and retention read ------------------------------------------------

    @property
    def offsets(self) -> dict[str, dict[OffsetKey, CommittedOffset]]:
        """group -> {(topic, partition): CommittedOffset} of every group coordinated here (the
        mapping a standalone GroupCoordinator has as `offsets`); a group whose partition is
        being released is left out."""
        out: dict[str, dict[OffsetKey, CommittedOffset]] = {}
        for group_id in self.known_group_ids():
            try:
                out[group_id] = self.fetch_offsets(group_id, None)
            except GroupError:
                continue
        return out

    # --- routing ------------------------------------------------------------------------------

    def _for(self, group_id: str) -> GroupCoordinator:
        topic, partition = self._ownership.coordinator_unit(0, group_id)
        assert topic == GROUP_TOPIC
        if not self._ownership.is_local(topic, partition):
            raise GroupError(ErrorCode.NOT_COORDINATOR,
                             f"group {group_id!r} is coordinated by another broker")
        running = self._running.get(partition)
        if running is None:
            # owned here but not loaded (yet, or its load failed and is tried again:
            # bundle_hooks.py): clients retry, as with Kafka's coordinator while it loads
            # (NOT_COORDINATOR sent them to look it up again, and confluent-kafka's
            # committed() gave up at once)
            raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"group {group_id!r}: coordinator partition {partition} is loading")
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

    # Membership calls write the group's metadata to the offsets ledger before answering.
    async def join(self, **kwargs: Any) -> dict[str, Any]:
        return await self._writing(kwargs["group_id"], lambda c: c.join(**kwargs))

    async def sync(self, **kwargs: Any) -> tuple[str | None, str | None, bytes]:
        return await self._writing(kwargs["group_id"], lambda c: c.sync(**kwargs))

    def heartbeat(self, **kwargs: Any) -> None:
        self._for(kwargs["group_id"]).heartbeat(**kwargs)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        return await self._writing(group_id, lambda c: c.leave(group_id, members))

    async def consumer_group_heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        return await self._writing(kwargs["group_id"],
                                   lambda c: c.consumer_group_heartbeat(**kwargs))

    async def _writing(self, group_id: str, call: Any) -> Any:
        """Run a call that writes the offsets ledger; a fenced ledger (auto-recovery fenced an
        idle ledger on a lost bookie, or a new owner took it) reloads the partition and the
        client is told NOT_COORDINATOR so it retries."""
        try:
            result = await call(self._for(group_id))
        except (ManagedLedgerFencedError, ManagedLedgerClosedError) as exc:
            _, partition = self._ownership.coordinator_unit(0, group_id)
            self._nursery.start_soon(self._reload, partition)
            raise GroupError(ErrorCode.NOT_COORDINATOR, f"offsets ledger fenced: {exc}") from exc
        self._for(group_id)  # still the coordinator (lease valid) when answering, or refuse
        return result

    async def commit_offsets(self, **kwargs: Any) -> None:
        await self._writing(kwargs["group_id"], lambda c: c.commit_offsets(**kwargs))

    async def apply_transactional_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        await self._writing(group_id, lambda c: c.apply_transactional_offsets(group_id, offsets))

    async def advance_offsets(
        self, group_id: str, offsets: Mapping[OffsetKey, CommittedOffset]
    ) -> None:
        await self._writing(group_id, lambda c: c.advance_offsets(group_id, offsets))

    def fetch_offsets(self, group_id: str,
                      keys: list[OffsetKey] | None) -> dict[OffsetKey, CommittedOffset]:
        return self._for(group_id).fetch_offsets(group_id, keys)

    async def delete_offsets(self, group_id: str, keys: list[OffsetKey]) -> None:
        await self._writing(group_id, lambda c: c.delete_offsets(group_id, keys))

    async def forget_topic(self, topic: str) -> int:
        """Every locally coordinated group's offsets of a deleted topic (CommittedOffsets.
        forget_topic); a partition whose ledger was fenced meanwhile is reloaded, and its new
        coordinator keeps them (one WARNING)."""
        deleted = 0
        for partition, running in sorted(self._running.items()):
            if not self._ownership.is_local(GROUP_TOPIC, partition):
                continue  # moving away: its next coordinator holds the offsets now
            try:
                deleted += await running.coordinator.forget_topic(topic)
            except (ManagedLedgerFencedError, ManagedLedgerClosedError) as exc:
                log.warning("offsets of deleted topic %s kept in group partition %d: %r",
                            topic, partition, exc)
                self._nursery.start_soon(self._reload, partition)
        return deleted

    def known_group_ids(self) -> list[str]:
        ids: set[str] = set()
        for running in self._running.values():
            ids.update(running.coordinator.known_group_ids())
        return sorted(ids)

    def describe(self, group_id: str) -> Group | None:
        return self._for(group_id).describe(group_id)

    async def delete_group(self, group_id: str) -> None:
        await self._writing(group_id, lambda c: c.delete_group(group_id))


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
