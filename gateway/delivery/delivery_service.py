"""The delivery engine under Trio: what the protocol fronts call (Kafka ShareFetch and
ShareAcknowledge, RocketMQ 5 ReceiveMessage, AckMessage and ChangeInvisibleDuration).

Per topic partition it opens a `DeliveryStateLog` on first use (fencing an earlier owner's
writes) and keeps every group's `DeliveryPartition` in it.  Each call runs the pure state
machine with the injected clock's time, then persists that group's delta before it returns,
so nothing a caller reveals to a client can be lost by a crash.  A failed write drops the
partition's in-memory state (it may be ahead of the log), so the next call reloads what is
durable.  `wait_for_change` lets a long poll sleep until records are released, a lock
expires, or the state is reset.

In a cluster the state of a topic partition lives with the partition's owner: `owns` says
whether this broker owns it now, and a partition it does not own is neither opened nor
changed (`NotOwnedError`), since opening the log fences the real owner's writes.  `unload`
closes a partition's state when its ownership moves away (waiting for the call in progress);
the next owner's open fences this broker's log, so a write that races the move fails instead
of landing beside the new owner's.

This module must never reveal an acquisition or acknowledgement before it is durable, and never
know a wire protocol.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import trio

from gateway.delivery.delivery_state import (
    AckBatch,
    AckError,
    AckResult,
    AcquiredRange,
    DeliveryPartition,
    DeliverySettings,
    DeliveryStats,
    RecordState,
)
from gateway.delivery.state_log import (
    STATE_LEDGER_PREFIX,
    DeliveryStateLog,
    SettingsFor,
    state_ledger_name,
)
from ledger_backend.managed_ledger import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerNotFoundError,
)

log = logging.getLogger(__name__)

Clock = Callable[[], int]
T = TypeVar("T")


class NotOwnedError(Exception):
    """The topic partition's delivery state lives on another broker (cluster mode)."""


async def delete_state_ledger(factory: ManagedLedgerFactory, name: str) -> None:
    """Delete a deleted topic's state log `name`, if there is one."""
    try:
        if await factory.exists(name):
            await factory.delete(name)
    except ManagedLedgerNotFoundError:
        pass  # deleted meanwhile (by another broker)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class PartitionView:
    """What admin listings show of one group's state on one partition."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    acquired: int
    available: int
    acknowledged: int
    archived: int


class _TopicPartitionState:
    def __init__(self, log_: DeliveryStateLog) -> None:
        self.log = log_
        self.lock = trio.Lock()
        self.changed = trio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class DeliveryService:
    """See the module docstring."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        config: ManagedLedgerConfig | None = None,
        *,
        settings_for: SettingsFor | None = None,
        clock: Clock = wall_clock_ms,
        snapshot_every: int = 1_000,
        ledger_prefix: str = STATE_LEDGER_PREFIX,
        ledger_name: Callable[[str, int], str] | None = None,
        owns: Callable[[str, int], bool] | None = None,
    ) -> None:
        self._factory = factory
        self._config = config
        self._settings_for: SettingsFor = settings_for or (lambda _group: DeliverySettings())
        self.clock = clock
        self._snapshot_every = snapshot_every
        # Each front keeps its groups' state logs under its own prefix (its own group names);
        # `ledger_name` names them otherwise (then `load_existing` finds none).
        self._ledger_prefix = ledger_prefix
        self._ledger_name = ledger_name or (
            lambda topic, partition: state_ledger_name(topic, partition, ledger_prefix))
        self._owns = owns or (lambda _topic, _partition: True)
        self._partitions: dict[tuple[str, int], _TopicPartitionState] = {}
        self._opening: dict[tuple[str, int], trio.Lock] = {}

    def _require_owned(self, topic: str, partition: int) -> None:
        if not self._owns(topic, partition):
            raise NotOwnedError(f"{topic}-{partition} is not owned by this broker")

    # ---- loading ------------------------------------------------------------------------
    async def _state(self, topic: str, partition: int) -> _TopicPartitionState:
        key = (topic, partition)
        self._require_owned(topic, partition)
        state = self._partitions.get(key)
        if state is not None:
            return state
        opening = self._opening.setdefault(key, trio.Lock())
        async with opening:
            state = self._partitions.get(key)
            if state is None:
                self._require_owned(topic, partition)
                log_ = DeliveryStateLog(
                    self._factory,
                    self._config,
                    ledger_name=self._ledger_name(topic, partition),
                    settings_for=self._settings_for,
                    snapshot_every=self._snapshot_every,
                )
                await log_.load()
                state = _TopicPartitionState(log_)
                if not self._owns(topic, partition):  # the ownership moved while it loaded
                    await self._drop(topic, partition, state)
                    raise NotOwnedError(f"{topic}-{partition} moved away while loading")
                self._partitions[key] = state
        return state

    async def unload(self, topic: str, partition: int) -> bool:
        """Close this partition's state (its ownership moves away), after the call in
        progress; whether it was loaded."""
        state = self._partitions.get((topic, partition))
        if state is None:
            return False
        async with state.lock:
            await self._drop(topic, partition, state)
        return True

    async def forget_topic(self, topic: str, partitions: int) -> None:
        """Close and delete every group's delivery state of a deleted topic's partitions, as
        Kafka deletes share-group state with its topic: a topic created again under the name
        starts with none (not at the old topic's start offsets), and nothing of it is loaded
        again at the next start."""
        await self.unload_topic(topic)
        for partition in range(partitions):
            await delete_state_ledger(self._factory, self._ledger_name(topic, partition))

    async def unload_topic(self, topic: str) -> None:
        """Close the loaded state of every partition of a deleted topic (its logs stay)."""
        for loaded, partition in self.loaded_partitions():
            if loaded == topic:
                await self.unload(loaded, partition)
        for key in [k for k in self._opening if k[0] == topic]:
            del self._opening[key]

    def loaded_partitions(self) -> list[tuple[str, int]]:
        return sorted(self._partitions)

    async def _drop(self, topic: str, partition: int, state: _TopicPartitionState) -> None:
        if self._partitions.get((topic, partition)) is state:
            del self._partitions[(topic, partition)]
        state.notify()
        with trio.CancelScope(shield=True):
            try:
                await state.log.close()
            except Exception as exc:  # noqa: BLE001 - already failing; the reload decides
                log.warning("closing delivery state of %s-%d failed: %s", topic, partition, exc)

    async def _run(
        self,
        group: str,
        topic: str,
        partition: int,
        start_at: int | None,
        change: Callable[[DeliveryPartition], T],
    ) -> T:
        """Apply `change` to the group's state (created at `start_at` if new; with None a
        missing state raises KeyError) and persist it before returning its result."""
        state = await self._state(topic, partition)
        async with state.lock:
            if self._partitions.get((topic, partition)) is not state:
                # unloaded (ownership moved) or dropped after a failed write while this
                # call waited: start again from what is durable, if it is still ours
                return await self._run(group, topic, partition, start_at, change)
            self._require_owned(topic, partition)
            groups = state.log.groups
            current = groups.get(group)
            if current is None:
                if start_at is None:
                    raise KeyError(group)
                current = groups[group] = DeliveryPartition(start_at, self._settings_for(group))
            current.settings = self._settings_for(group)
            result = change(current)
            try:
                await state.log.persist(group)
            except BaseException:
                await self._drop(topic, partition, state)
                raise
            if current.has_available(current.end_offset):
                state.notify()
            return result

    # ---- the calls the fronts make ------------------------------------------------------
    async def acquire(
        self,
        group: str,
        topic: str,
        partition: int,
        holder: str,
        max_records: int,
        *,
        fetchable_end: int,
        log_start: int,
        start_at: int,
        lock_ms: int | None = None,
    ) -> list[AcquiredRange]:
        """Acquire up to `max_records` for `holder` (durably).  `start_at` is where a group that
        has no state here yet starts (share.auto.offset.reset); records below `log_start` are
        gone and skipped; nothing at or past `fetchable_end` (high watermark or last stable
        offset) is handed out."""

        def change(p: DeliveryPartition) -> list[AcquiredRange]:
            p.skip_before(log_start)
            return p.acquire(holder, max_records, self.clock(), fetchable_end, lock_ms)

        return await self._run(group, topic, partition, max(start_at, log_start), change)

    async def acknowledge(
        self,
        group: str,
        topic: str,
        partition: int,
        holder: str | None,
        batches: Iterable[AckBatch],
        *,
        lock_ms: int | None = None,
    ) -> AckResult:
        """Acknowledge (accept, release, reject, gap, renew) durably; all or nothing."""
        batches = list(batches)
        try:
            return await self._run(
                group,
                topic,
                partition,
                None,
                lambda p: p.acknowledge(holder, batches, self.clock(), lock_ms),
            )
        except KeyError:
            return AckResult(AckError.INVALID_RECORD_STATE, "nothing is in flight here")

    async def give_back(
        self, group: str, topic: str, partition: int, holder: str,
        ranges: Iterable[AcquiredRange],
    ) -> int:
        """Undo, durably, an acquisition that never reached `holder`
        (DeliveryPartition.give_back); how many records are available again."""
        ranges = list(ranges)
        try:
            returned = await self._run(
                group, topic, partition, None, lambda p: p.give_back(holder, ranges))
        except KeyError:
            return 0
        (await self._state(topic, partition)).notify()
        return len(returned)

    async def release_holder(self, group: str, holder: str) -> int:
        """Everything `holder` acquired in `group`, on every loaded partition, is available
        again (its session closed or it left the group); how many records."""
        released = 0
        for topic, partition in list(self._partitions):
            try:
                released += len(
                    await self._run(
                        group, topic, partition, None, lambda p: p.release_holder(holder)
                    )
                )
            except (KeyError, NotOwnedError):
                continue
        return released

    async def reset_start(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Start the group over at `offset` on this partition (AlterShareGroupOffsets)."""
        await self._run(group, topic, partition, offset, lambda p: p.reset_start(offset))
        (await self._state(topic, partition)).notify()

    async def forget(self, group: str, topic: str, partition: int) -> None:
        """Drop the group's state on this partition, durably (DeleteShareGroupOffsets)."""
        state = await self._state(topic, partition)
        async with state.lock:
            if self._partitions.get((topic, partition)) is not state:
                return await self.forget(group, topic, partition)
            self._require_owned(topic, partition)
            if group in state.log.groups:
                try:
                    await state.log.forget(group)
                except BaseException:
                    await self._drop(topic, partition, state)
                    raise

    async def view(self, group: str, topic: str, partition: int) -> PartitionView | None:
        """The group's state on this partition for listings, or None when it has none."""
        state = await self._state(topic, partition)
        current = state.log.groups.get(group)
        if current is None:
            return None
        current.expire(self.clock())  # shown as it is now; persisted by the next change
        return PartitionView(
            topic,
            partition,
            current.start_offset,
            current.end_offset,
            current.count(RecordState.ACQUIRED),
            current.count(RecordState.AVAILABLE),
            current.count(RecordState.ACKNOWLEDGED),
            current.count(RecordState.ARCHIVED),
        )

    async def end_offset(self, group: str, topic: str, partition: int) -> int | None:
        """Where the group's never-delivered records start here (None: no state yet)."""
        current = (await self._state(topic, partition)).log.groups.get(group)
        return None if current is None else current.end_offset

    async def load_existing(self, is_local: Callable[[str, int], bool] | None = None) -> int:
        """Load every persisted state log (of the partitions `is_local` accepts), so listings
        after a restart show every group; how many were loaded."""
        loaded = 0
        if self._ledger_name(" ", 0) != state_ledger_name(" ", 0, self._ledger_prefix):
            return 0  # custom names: nothing to recognise
        for name in await self._factory.list_names():
            if not name.startswith(self._ledger_prefix):
                continue
            topic, _, number = name[len(self._ledger_prefix):].rpartition("-")
            if not topic or not number.isdigit():
                continue
            if is_local is None or is_local(topic, int(number)):
                await self._state(topic, int(number))
                loaded += 1
        return loaded

    def stats(self) -> list[tuple[str, str, int, DeliveryStats, int]]:
        """(group, topic, partition, counters since load, records in flight) of every loaded
        state, for metrics."""
        return [(group, topic, partition, current.stats, current.in_flight())
                for (topic, partition), state in sorted(self._partitions.items())
                for group, current in sorted(state.log.groups.items())]

    def loaded_groups(self) -> dict[str, list[tuple[str, int]]]:
        """group -> the loaded topic partitions where it has state."""
        out: dict[str, list[tuple[str, int]]] = {}
        for (topic, partition), state in self._partitions.items():
            for group in state.log.groups:
                out.setdefault(group, []).append((topic, partition))
        return out

    async def wait_for_change(
        self, topic: str, partition: int, group: str, timeout_ms: int
    ) -> None:
        """Sleep until records of this partition may have become available to `group`
        (released, lock expired, reset) or `timeout_ms` passed; new log data is the caller's
        to wait for."""
        state = await self._state(topic, partition)
        wait_ms = timeout_ms
        current = state.log.groups.get(group)
        deadline = current.next_deadline() if current is not None else None
        if deadline is not None:
            wait_ms = min(wait_ms, max(0, deadline - self.clock()) + 1)
        with trio.move_on_after(max(0, wait_ms) / 1000):
            await state.changed.wait()

    async def close(self) -> None:
        for (topic, partition), state in list(self._partitions.items()):
            await self._drop(topic, partition, state)
