"""What a cluster bundle broker (gateway/rocketmq/bundle_broker.py) reports about itself to the
admin/statistics handlers, and how its offsets count in backlog quotas.

A RocketMQ broker answers consume stats (208), "who consumes this topic" (300), offset resets
(222) and its runtime info (28) from its own queues and offsets, so bundle b's broker lists the
offsets kept in bundle b's offset ledger, translated back from (storage topic, partition) to
(RocketMQ topic, queue id of bundle b), and counts the messages of the partitions of bundle b
open here.  A bundle not owned here lists nothing (its routes do not point here).

`ClusterBacklogOffsets` is the backlog-quota offset source (gateway/topics/backlog_quota.py) over
every
bundle owned here: a partition's RocketMQ offsets live in the ledger of the partition's bundle.

This module must never open a partition, nor write an offset of a bundle not owned here.
"""

from __future__ import annotations

from typing import Any

from gateway.cluster.bundle_placement import bundle_of
from gateway.rocketmq.service import RocketMQOffsets
from protocols.rocketmq.topic_names import from_storage


def _store(side: Any, bundle: int) -> RocketMQOffsets | None:
    found: RocketMQOffsets | None = side.offset_ledgers.store(bundle)
    return found


def bundle_committed(side: Any, bundle: int, group: str) -> dict[tuple[str, int], int]:
    """(RocketMQ topic, queue id of `bundle`) -> committed offset of `group`."""
    offsets = _store(side, bundle)
    if offsets is None:
        return {}
    catalogue = side.topics.topics()
    listed: dict[tuple[str, int], int] = {}
    for (storage_topic, partition), offset in offsets.committed(group).items():
        info = catalogue.get(storage_topic)
        if info is None or partition >= info.partitions:
            continue  # deleted or shrunk since: no queue to name
        owner, queue_id = side.queue_map.queue_of(storage_topic, info.partitions, partition)
        if owner == bundle:
            listed[(from_storage(storage_topic), queue_id)] = offset
    return listed


def bundle_groups(side: Any, bundle: int) -> list[str]:
    offsets = _store(side, bundle)
    return offsets.groups() if offsets is not None else []


async def remove_bundle_group(side: Any, bundle: int, group: str) -> None:
    offsets = _store(side, bundle)
    if offsets is not None:
        await offsets.remove_group(group)


def bundle_message_totals(side: Any, bundle: int) -> tuple[int, int]:
    """(messages in the bundle's partitions open here, messages its committed offsets
    consumed) -- GET_BROKER_RUNTIME_INFO's put/get totals for this one broker."""
    bundles = side.queue_map.bundles
    puts = sum(max(plog.high_watermark, 0)
               for (topic, partition), plog in side.topics.open_partitions().items()
               if bundle_of(topic, partition, bundles) == bundle)
    offsets = _store(side, bundle)
    gets = 0 if offsets is None else sum(
        sum(offsets.committed(g).values()) for g in offsets.groups())
    return puts, gets


class ClusterBacklogOffsets:
    """The RocketMQ offsets of the bundles owned here, by storage topic and partition."""

    def __init__(self, side: Any) -> None:
        self._side = side

    def _offsets_of(self, topic: str, partition: int) -> RocketMQOffsets | None:
        return _store(self._side, bundle_of(topic, partition, self._side.queue_map.bundles))

    def committed_on(self, topic: str, partition: int) -> dict[str, int]:
        offsets = self._offsets_of(topic, partition)
        return {} if offsets is None else offsets.committed_on(topic, partition)

    async def advance(self, group: str, topic: str, partition: int, to: int) -> None:
        offsets = self._offsets_of(topic, partition)
        if offsets is None:
            return  # released meanwhile: its new owner's pass decides
        await offsets.advance(group, topic, partition, to)
