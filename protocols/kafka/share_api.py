"""What the share-group handlers need from the broker process, as typing.Protocols.

The handlers (handlers/share_groups.py, share_fetch.py, share_offsets.py) reach the broker's
`share_groups` object through this shape; the real one is gateway/kafka/share_groups.py, which
puts the membership coordinator, the share sessions, the group configs and the per-record
delivery engine (gateway/delivery) together.

This module must never import gateway/ or do I/O: it only declares shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from protocols.kafka.errors import InvalidConfigError
from protocols.kafka.share_group_coordinator import ShareGroupCoordinator
from protocols.kafka.share_sessions import ShareSessionCache

# share.auto.offset.reset / share.isolation.level values
EARLIEST, LATEST = "earliest", "latest"
BY_DURATION = "by_duration:"  # by_duration:<ISO-8601 duration>, e.g. by_duration:PT1H
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


@dataclass(frozen=True)
class ShareGroupSettings:
    """A share group's configs as Kafka names them (group resource, IncrementalAlterConfigs)."""

    record_lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_count_limit: int = 5  # share.delivery.count.limit
    auto_offset_reset: str = LATEST  # share.auto.offset.reset (or "by_duration:<ISO-8601>")
    isolation_level: str = READ_UNCOMMITTED  # share.isolation.level
    dead_letter_topic: str = ""  # share.dead.letter.topic (ledgerwire's own; "" = none)


class AcquiredView(Protocol):
    @property
    def first(self) -> int: ...

    @property
    def last(self) -> int: ...

    @property
    def delivery_count(self) -> int: ...


@dataclass(frozen=True)
class SharePartitionState:
    """One group's state on one partition, for DescribeShareGroupOffsets and listings."""

    start_offset: int
    end_offset: int
    in_flight: int
    archived: int


class ShareGroupsApi(Protocol):
    @property
    def coordinator(self) -> ShareGroupCoordinator: ...

    @property
    def sessions(self) -> ShareSessionCache: ...

    def settings(self, group_id: str) -> ShareGroupSettings: ...

    async def fresh_settings(self, group_id: str) -> ShareGroupSettings:
        """The group's settings read from the store now, not from a cache."""
        ...

    def check_coordinator(self, group_id: str) -> None:
        """KafkaProtocolError (NOT_COORDINATOR) unless this broker coordinates the group."""
        ...

    async def acquire(
        self, group_id: str, topic: str, partition: int, member_id: str, max_records: int, *,
        fetchable_end: int, log_start: int, start_at: int,
    ) -> Sequence[AcquiredView]: ...

    async def acknowledge(
        self, group_id: str, topic: str, partition: int, member_id: str,
        batches: Sequence[tuple[int, int, tuple[int, ...]]],
    ) -> tuple[int, str | None]:
        """(Kafka error code, message) of applying the batches, all or none."""
        ...

    async def end_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """Where the group's never-delivered records start on this partition (None: no state)."""
        ...

    async def wait_for_change(self, topic: str, partition: int, group_id: str,
                              timeout_ms: int) -> None: ...

    async def dead_letter(self, group_id: str, topic: str, partition: int,
                          batches: Sequence[bytes], counts: Mapping[int, int]) -> None:
        """Copy the records at `counts`' offsets (offset -> delivery count) out of the stored
        `batches` to the group's dead-letter topic, durably; control records are skipped."""
        ...

    async def give_back(self, group_id: str, topic: str, partition: int, member_id: str,
                        ranges: Sequence[tuple[int, int, int]]) -> int:
        """Make records the member acquired but never got ((first, last, delivery count) as
        acquired) available again at once, durably, with that delivery not counted; how many
        (records acknowledged or expired meanwhile are left alone)."""
        ...

    async def release_member(self, group_id: str, member_id: str) -> None: ...

    async def state(self, group_id: str, topic: str,
                    partition: int) -> SharePartitionState | None: ...

    async def alter_start(self, group_id: str, topic: str, partition: int,
                          offset: int) -> None: ...

    async def forget(self, group_id: str, topic: str, partition: int) -> None: ...

    async def known_partitions(self, group_id: str) -> list[tuple[str, int]]:
        """The topic partitions where the group has delivery state."""
        ...

    async def group_ids(self) -> list[str]:
        """Every share group this broker knows (members or persisted state)."""
        ...

    async def delete_group(self, group_id: str) -> None: ...

    async def alter_configs(self, group_id: str, configs: dict[str, str | None], *,
                            validate_only: bool) -> None:
        """Set (str) or delete (None) group configs; InvalidConfigError on a bad one."""
        ...

    async def describe_configs(self, group_id: str) -> dict[str, str]:
        """The group's explicitly set configs."""
        ...


# name -> (default, check); the limits are Kafka's broker-side bounds, except that the lock
# duration may go down to 1 s (Kafka's default floor is 15 s) so tests need not wait long.
def _int_between(low: int, high: int) -> Callable[[str], bool]:
    return lambda v: v.lstrip("-").isdigit() and low <= int(v) <= high


SHARE_GROUP_CONFIGS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "share.record.lock.duration.ms": ("30000", _int_between(1_000, 3_600_000)),
    "share.delivery.count.limit": ("5", _int_between(2, 10)),
    "share.auto.offset.reset": (LATEST, lambda v: v in (EARLIEST, LATEST)
                                or by_duration_ms(v) is not None),
    "share.isolation.level": (READ_UNCOMMITTED, lambda v: v in (READ_UNCOMMITTED, READ_COMMITTED)),
    "share.dead.letter.topic": ("", lambda v: v == "" or _topic_name(v)),
}


def validate_share_config(name: str, value: str | None) -> None:
    """InvalidConfigError unless `name` is a share-group config and `value` (None: delete) is
    allowed for it."""
    entry = SHARE_GROUP_CONFIGS.get(name)
    if entry is None:
        raise InvalidConfigError(f"Unknown group config name: {name}")
    if value is not None and not entry[1](value):
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}")


def share_settings(configs: Mapping[str, str]) -> ShareGroupSettings:
    """A group's settings from its explicitly set configs (defaults for the rest)."""
    def get(name: str) -> str:
        return configs.get(name, SHARE_GROUP_CONFIGS[name][0])

    return ShareGroupSettings(
        record_lock_duration_ms=int(get("share.record.lock.duration.ms")),
        delivery_count_limit=int(get("share.delivery.count.limit")),
        auto_offset_reset=get("share.auto.offset.reset"),
        isolation_level=get("share.isolation.level"),
        dead_letter_topic=get("share.dead.letter.topic"),
    )


def _topic_name(value: str) -> bool:
    return (len(value) <= 249 and value not in (".", "..")
            and re.fullmatch(r"[A-Za-z0-9._-]+", value) is not None)


# java.time.Duration.parse's form, as Kafka reads by_duration: days, hours, minutes, seconds
_DURATION = re.compile(
    r"P(?:(\d{1,9})D)?(?:T(?=\d)(?:(\d{1,9})H)?(?:(\d{1,9})M)?(?:(\d{1,9})(?:\.(\d{1,9}))?S)?)?",
    re.IGNORECASE)


def by_duration_ms(value: str) -> int | None:
    """The duration of a `by_duration:<ISO-8601>` reset in milliseconds, or None when `value` is
    not one (a negative or empty duration is not one either)."""
    if not value.startswith(BY_DURATION):
        return None
    text = value[len(BY_DURATION):]
    match = _DURATION.fullmatch(text)
    if match is None or text.upper() in ("P", "PT"):
        return None
    days, hours, minutes, seconds, fraction = match.groups()
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
    ms += int(seconds or 0) * 1000 + int(((fraction or "") + "000")[:3])
    return ms
