"""Kafka share groups in the broker process: the object the share-group handlers reach as
`broker.share_groups` (the shape protocols/kafka/share_api.ShareGroupsApi declares).

It puts together the membership coordinator and the share sessions (protocols/kafka), the
group configs (gateway/delivery/group_configs.py) and the per-record delivery engine
(gateway/delivery/delivery_service.py), and maps the engine's answers to Kafka's error codes.
`run` expires silent members and releases the records of every member that left.

Dead letters (share.dead.letter.topic, ledgerwire's own group config, off by default): the
engine's limit is then two past the group's, so a record that reached the group's limit comes
back once more; the fetch that acquires it copies it to the dead-letter topic (partition 0,
created on first use, headers naming where it came from) and only then archives it, so a crash
between the two copies it again, never loses it.  The second extra delivery is the retry of a
copy that failed; after it the record is archived without a copy.  Where the copies are
written is gateway/kafka/share_dead_letters.py's (locally, or to the owner in a cluster).

In a cluster (`coordinates` given) membership lives on the group's coordinator broker (the
owner of its coordinator partition; elsewhere a heartbeat is told NOT_COORDINATOR) and each
partition's delivery state on the partition's owner (the engine's `owns`; elsewhere a fetch or
acknowledgement is told NOT_LEADER_OR_FOLLOWER).  `ShareGroupBundles.releasing` unloads the
state of partitions whose bundle moves away; the new owner loads it on first use (opening the
log fences the old owner).  Membership is not durable: after a coordinator moves, members are
told UNKNOWN_MEMBER_ID and join again (records they hold stay theirs until their locks expire
or they acknowledge them).

This module must never decide delivery itself, nor reveal anything the engine has not made
durable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from gateway.delivery.delivery_service import DeliveryService, NotOwnedError
from gateway.delivery.delivery_state import AckBatch, AckError, AcquiredRange, DeliverySettings
from gateway.delivery.group_configs import ShareGroupConfigs
from gateway.kafka.share_dead_letters import DeadLetterSink
from protocols.kafka.errors import (
    ErrorCode,
    InvalidConfigError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
)
from protocols.kafka.record_batch import Record, build_batch, decode_records, parse_header
from protocols.kafka.share_api import (
    ShareGroupSettings,
    SharePartitionState,
    share_settings,
    validate_share_config,
)
from protocols.kafka.share_group_coordinator import ShareGroupConfig, ShareGroupCoordinator
from protocols.kafka.share_sessions import ShareSessionCache

log = logging.getLogger("ledgerwire.kafka.share_groups")

EXPIRY_INTERVAL_S = 1.0
CONFIG_REFRESH_S = 5.0
DEAD_LETTER_CONFIG = "share.dead.letter.topic"
# with a dead-letter topic: the delivery that copies it there, and one retry of that copy
DEAD_LETTER_ATTEMPTS = 2
# Share groups' state logs, apart from other fronts' (RocketMQ 5 groups are another namespace).
SHARE_STATE_LEDGER_PREFIX = "__system/delivery/kafka-share/"
_ACK_CODES = {
    AckError.NONE: ErrorCode.NONE,
    AckError.INVALID_RECORD_STATE: ErrorCode.INVALID_RECORD_STATE,
    AckError.INVALID_REQUEST: ErrorCode.INVALID_REQUEST,
}


class ShareGroups:
    """See the module docstring."""

    def __init__(
        self,
        delivery_for: Callable[[Callable[[str], DeliverySettings]], DeliveryService],
        configs: ShareGroupConfigs,
        config: ShareGroupConfig | None = None,
        *,
        is_local: Callable[[str, int], bool] | None = None,
        coordinates: Callable[[str], bool] | None = None,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.configs = configs
        self._dead_letters = dead_letters  # where dead letters go (None: not served)
        self.dead_lettered: dict[tuple[str, str, int], int] = {}  # for metrics
        self._is_local = is_local
        self._coordinates = coordinates
        self.delivery = delivery_for(self._delivery_settings)
        self.coordinator = ShareGroupCoordinator(config, self._left)
        self.sessions = ShareSessionCache()
        self._leavers_in, self._leavers_out = trio.open_memory_channel[tuple[str, str]](10_000)

    # ---- settings -----------------------------------------------------------------------
    def settings(self, group_id: str) -> ShareGroupSettings:
        return share_settings(self.configs.cached(group_id))

    async def fresh_settings(self, group_id: str) -> ShareGroupSettings:
        """The group's settings as stored now (another broker may have just changed them)."""
        return share_settings(await self.configs.read(group_id))

    def _delivery_settings(self, group_id: str) -> DeliverySettings:
        s = self.settings(group_id)
        extra = DEAD_LETTER_ATTEMPTS if s.dead_letter_topic else 0
        return DeliverySettings(lock_duration_ms=s.record_lock_duration_ms,
                                delivery_count_limit=s.delivery_count_limit + extra)

    async def alter_configs(self, group_id: str, configs: dict[str, str | None], *,
                            validate_only: bool) -> None:
        for name, value in configs.items():
            validate_share_config(name, value)
            if name == DEAD_LETTER_CONFIG and value and self._dead_letters is None:
                raise InvalidConfigError(f"{name}: dead-letter topics are not served by "
                                         "this broker")
            if name == DEAD_LETTER_CONFIG and value and value.startswith("__"):
                raise InvalidConfigError(f"{name}: {value} is an internal topic name")
        if validate_only:
            return

        def change(current: dict[str, str]) -> dict[str, str]:
            for name, value in configs.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            return current

        await self.configs.update(group_id, change)

    async def describe_configs(self, group_id: str) -> dict[str, str]:
        await self.configs.refresh()
        return dict(self.configs.cached(group_id))

    # ---- cluster ------------------------------------------------------------------------
    def check_coordinator(self, group_id: str) -> None:
        """NOT_COORDINATOR unless this broker coordinates the group's membership."""
        if self._coordinates is not None and not self._coordinates(group_id):
            raise NotCoordinatorError(f"share group {group_id} is coordinated by another broker")

    async def topic_deleted(self, topic: str, partitions: int) -> None:
        """A deleted topic's share-group state goes with it (DeliveryService.forget_topic)."""
        await self.delivery.forget_topic(topic, partitions)
        for key in [k for k in self.dead_lettered if k[1] == topic]:
            del self.dead_lettered[key]

    async def releasing(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Ownership of these partitions moves away: close their state here."""
        for topic, partition in partitions:
            await self.delivery.unload(topic, partition)

    # ---- delivery -----------------------------------------------------------------------
    async def acquire(self, group_id: str, topic: str, partition: int, member_id: str,
                      max_records: int, *, fetchable_end: int, log_start: int,
                      start_at: int) -> Sequence[Any]:
        await self._known(group_id)
        async with _owned():
            return await self.delivery.acquire(group_id, topic, partition, member_id,
                                               max_records, fetchable_end=fetchable_end,
                                               log_start=log_start, start_at=start_at)

    async def acknowledge(self, group_id: str, topic: str, partition: int, member_id: str,
                          batches: Sequence[tuple[int, int, tuple[int, ...]]]
                          ) -> tuple[int, str | None]:
        async with _owned():
            result = await self.delivery.acknowledge(
                group_id, topic, partition, member_id,
                [AckBatch(first, last, types) for first, last, types in batches])
        return int(_ACK_CODES[result.error]), result.message

    async def give_back(self, group_id: str, topic: str, partition: int, member_id: str,
                        ranges: Sequence[tuple[int, int, int]]) -> int:
        async with _owned():
            return await self.delivery.give_back(
                group_id, topic, partition, member_id,
                [AcquiredRange(first, last, count) for first, last, count in ranges])

    async def end_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        async with _owned():
            return await self.delivery.end_offset(group_id, topic, partition)

    async def wait_for_change(self, topic: str, partition: int, group_id: str,
                              timeout_ms: int) -> None:
        async with _owned():
            await self.delivery.wait_for_change(topic, partition, group_id, timeout_ms)

    async def release_member(self, group_id: str, member_id: str) -> None:
        released = await self.delivery.release_holder(group_id, member_id)
        if released:
            log.info("share group member's records released",
                     extra={"group": group_id, "member": member_id, "records": released})

    async def dead_letter(self, group_id: str, topic: str, partition: int,
                          batches: Sequence[bytes], counts: Mapping[int, int]) -> None:
        target = self.settings(group_id).dead_letter_topic
        if not target or self._dead_letters is None:
            raise InvalidConfigError(f"share group {group_id} has no dead-letter topic")
        copies: list[Record] = []
        for batch in batches:
            header = parse_header(batch)
            if header.is_control:
                continue
            for r in decode_records(batch):
                if r.offset in counts:
                    copies.append(Record(0, r.timestamp, r.key, r.value, [*r.headers, *(
                        (name, str(value).encode()) for name, value in (
                            ("dlq.group", group_id), ("dlq.topic", topic),
                            ("dlq.partition", partition), ("dlq.offset", r.offset),
                            ("dlq.delivery.count", counts[r.offset])))]))
        if not copies:
            return
        await self._dead_letters.append(target, build_batch(copies))
        key = (group_id, topic, partition)
        self.dead_lettered[key] = self.dead_lettered.get(key, 0) + len(copies)
        log.info("share group %s: %d records of %s-%d copied to %s after %d deliveries",
                 group_id, len(copies), topic, partition, target,
                 self.settings(group_id).delivery_count_limit)

    # ---- admin --------------------------------------------------------------------------
    async def state(self, group_id: str, topic: str,
                    partition: int) -> SharePartitionState | None:
        async with _owned():
            view = await self.delivery.view(group_id, topic, partition)
        if view is None:
            return None
        return SharePartitionState(view.start_offset, view.end_offset,
                                   view.acquired + view.available, view.archived)

    async def alter_start(self, group_id: str, topic: str, partition: int, offset: int) -> None:
        self._require_empty(group_id)
        await self._known(group_id)
        async with _owned():
            await self.delivery.reset_start(group_id, topic, partition, offset)

    async def forget(self, group_id: str, topic: str, partition: int) -> None:
        self._require_empty(group_id)
        async with _owned():
            await self.delivery.forget(group_id, topic, partition)

    async def known_partitions(self, group_id: str) -> list[tuple[str, int]]:
        return sorted(self.delivery.loaded_groups().get(group_id, []))

    async def group_ids(self) -> list[str]:
        await self.configs.refresh()
        ids = set(self.coordinator.groups) | set(self.configs.groups())
        ids |= set(self.delivery.loaded_groups())
        return sorted(ids)

    async def delete_group(self, group_id: str) -> None:
        self._require_empty(group_id)
        for topic, partition in await self.known_partitions(group_id):
            async with _owned():
                await self.delivery.forget(group_id, topic, partition)
        await self.configs.delete(group_id)
        self.coordinator.groups.pop(group_id, None)
        self.sessions.drop_group(group_id)

    def _require_empty(self, group_id: str) -> None:
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(f"share group {group_id} has members")

    async def _known(self, group_id: str) -> None:
        """Record the group durably on first use (so ListGroups shows it after a restart)."""
        if group_id not in self.configs.groups():
            await self.configs.update(group_id, lambda current: current)

    # ---- housekeeping -------------------------------------------------------------------
    def _left(self, group_id: str, member_id: str) -> None:
        try:
            self._leavers_in.send_nowait((group_id, member_id))
        except trio.WouldBlock:
            log.warning("share group %s: too many members leaving at once; %s's records "
                        "come back when their locks expire", group_id, member_id)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Expire silent members and release what every member that left holds."""
        await self.configs.reload()
        await self.delivery.load_existing(self._is_local)
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_loop)
            nursery.start_soon(self._refresh_loop)
            async for group_id, member_id in self._leavers_out:
                self.sessions.close(group_id, member_id)
                try:
                    await self.release_member(group_id, member_id)
                except Exception as exc:  # noqa: BLE001 - the locks expire anyway
                    log.warning("share group %s: releasing %s's records failed: %s",
                                group_id, member_id, exc)

    async def _expire_loop(self) -> None:
        while True:
            await trio.sleep(EXPIRY_INTERVAL_S)
            self.coordinator.expire(trio.current_time() * 1000)

    async def _refresh_loop(self) -> None:
        """Group configs changed through another broker reach this one within seconds."""
        while True:
            await trio.sleep(CONFIG_REFRESH_S)
            try:
                await self.configs.refresh()
            except Exception as exc:  # noqa: BLE001 - the cached configs stay in use
                log.warning("share group configs not re-read: %s", exc)

    async def close(self) -> None:
        await self.delivery.close()


class ShareGroupBundles:
    """The cluster broker's bundle extension (acquired / releasing hooks) for share groups."""

    def __init__(self, share_groups: ShareGroups, bundle_of: Callable[[str, int], int]) -> None:
        self._share = share_groups
        self._bundle_of = bundle_of

    async def acquired(self, bundle: int) -> None:
        """Nothing yet: the bundle is not ready until the hooks return, and opening a state
        log needs it ready; the first fetch or acknowledgement loads it."""

    async def releasing(self, bundle: int) -> None:
        await self._share.releasing([
            (topic, partition) for topic, partition in self._share.delivery.loaded_partitions()
            if self._bundle_of(topic, partition) == bundle])


@asynccontextmanager
async def _owned() -> AsyncIterator[None]:
    """The engine's NotOwnedError as Kafka's NOT_LEADER_OR_FOLLOWER (the client looks the
    partition's leader up again)."""
    try:
        yield
    except NotOwnedError as exc:
        raise NotLeaderOrFollowerError(str(exc)) from exc
