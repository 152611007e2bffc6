"""Bundle b of a cluster broker as one RocketMQ broker: BundleBroker (served on port base + b)
and the views of the cluster it answers through, each narrowed to bundle b: its topics (a
topic's partitions placed in b are b's queues, BundleTopics opens only what b owns), its
backlog quotas and its consumer offsets (BundleOffsets, kept in the bundle's own ledger, which
RocketMQOffsetLedgers loads when b is acquired and closes before b is released).

Everything cluster-wide (ownership, the topic service, routes, registrations, serving the
ports) is ClusterRocketMQ's, in cluster.py; the views reach it through `BundleSide`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

from gateway.cluster.ownership import OwnershipService
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.bundle_admin import (
    bundle_committed,
    bundle_groups,
    bundle_message_totals,
    remove_bundle_group,
)
from gateway.rocketmq.bundle_logs import BundleNotServedError, open_bundle_log
from gateway.rocketmq.bundle_services import BundleClients, BundleTransactions
from gateway.rocketmq.delays import DelayScheduler
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQOffsets
from gateway.rocketmq.subscription_groups import SubscriptionGroupStore
from gateway.topics.topic_service import TopicService
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicInfoLike, TopicServiceLike
from protocols.rocketmq.broker_stats import BrokerStats
from protocols.rocketmq.client_details import ClientDetails
from protocols.rocketmq.client_registry import ClientRegistry
from protocols.rocketmq.queue_map import BundleQueueMap
from protocols.rocketmq.topic_names import from_storage, to_storage


class BundleSide(Protocol):
    """What a bundle's views use of the cluster's RocketMQ side (ClusterRocketMQ)."""

    @property
    def topics(self) -> TopicService: ...

    @property
    def queue_map(self) -> BundleQueueMap: ...

    @property
    def ownership(self) -> OwnershipService: ...

    @property
    def offset_ledgers(self) -> RocketMQOffsetLedgers: ...

    @property
    def clients(self) -> ClientRegistry: ...

    @property
    def subscription_groups(self) -> SubscriptionGroupStore: ...

    @property
    def client_details(self) -> ClientDetails: ...

    @property
    def boot_timestamp_ms(self) -> int: ...

    def partition_of(self, bundle: int, storage_topic: str, queue_id: int) -> int: ...

    async def ensure_topic(self, topic: str, queue_nums: int, *,
                           explicit: bool = False) -> TopicInfoLike: ...

    def now_ms(self) -> int: ...

    def notify_consumers_changed(self, group: str) -> None: ...

    def connection_closed(self, conn: Any) -> None: ...


def offsets_ledger_name(bundle: int) -> str:
    return f"{ROCKETMQ_OFFSETS_LEDGER}-b{bundle}"


@dataclass
class BundleTopicInfo:
    """A topic as one bundle's broker sees it: `partitions` is its queue count there."""

    name: str
    partitions: int
    configs: dict[str, str]


class BundleTopicTable(Mapping[str, BundleTopicInfo]):
    """The topic catalogue seen through one bundle, translated lazily per lookup."""

    def __init__(self, table: Mapping[str, Any], queue_map: BundleQueueMap, bundle: int) -> None:
        self._table = table
        self._map = queue_map
        self._bundle = bundle

    def __getitem__(self, name: str) -> BundleTopicInfo:
        return translate(self._table[name], self._map, self._bundle)

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def translate(info: Any, queue_map: BundleQueueMap, bundle: int) -> BundleTopicInfo:
    return BundleTopicInfo(info.name, queue_map.queue_count(info.name, info.partitions, bundle),
                           dict(info.configs))


class RocketMQOffsetLedgers:
    """Per-bundle RocketMQ consumer offsets (a BundleExtension of the cluster broker)."""

    def __init__(self, factory: ManagedLedgerFactory, config: ManagedLedgerConfig) -> None:
        self._factory = factory
        self._config = config
        self._stores: dict[int, RocketMQOffsets] = {}

    def store(self, bundle: int) -> RocketMQOffsets | None:
        return self._stores.get(bundle)

    async def acquired(self, bundle: int) -> None:
        """Load the bundle's offsets afresh: a store left from an earlier ownership may be
        stale (another broker owned the bundle meanwhile) or closed by the fencing."""
        await self.releasing(bundle)
        offsets = RocketMQOffsets(LedgerOffsetStore(self._factory, self._config,
                                                    ledger_name=offsets_ledger_name(bundle)))
        await offsets.load()
        self._stores[bundle] = offsets

    async def releasing(self, bundle: int) -> None:
        offsets = self._stores.pop(bundle, None)
        if offsets is not None:
            await offsets.close()

    async def close_all(self) -> None:
        for bundle in sorted(self._stores):
            await self.releasing(bundle)

    async def topic_deleted(self, info: Any) -> None:
        """A deleted topic's consumer offsets go from every bundle owned here (a topic
        deletion hook: each broker runs it for its own bundles)."""
        for _, offsets in sorted(self._stores.items()):
            await offsets.forget_topic(from_storage(info.name))

    def __repr__(self) -> str:
        return "RocketMQOffsetLedgers"


class BundleTopics:
    """TopicServiceLike of bundle b: partitions are b's queues; opens only what b owns."""

    def __init__(self, side: BundleSide, bundle: int) -> None:
        self._side = side
        self._bundle = bundle

    def topics(self) -> Mapping[str, BundleTopicInfo]:  # type: ignore[override]
        return BundleTopicTable(self._side.topics.topics(), self._side.queue_map, self._bundle)

    async def refresh_topic(self, name: str) -> BundleTopicInfo | None:
        info = await self._side.topics.refresh_topic(name)
        return None if info is None else translate(info, self._side.queue_map, self._bundle)

    async def create_topic(self, name: str, partitions: int,
                           configs: dict[str, str] | None = None) -> None:
        await self._side.topics.create_topic(
            name, self._side.queue_map.cluster_partitions(name, partitions), configs)

    async def create_partitions(self, name: str, total: int) -> None:
        """Give this bundle (and so every bundle) at least `total` queues, as RocketMQ's
        updateTopic does per broker: q * bundles partitions, never fewer than today's, and a
        multiple of bundles (consecutive placement then gives each bundle the same share)."""
        bundles = self._side.queue_map.bundles
        info = await self._side.topics.refresh_topic(name)  # another worker may have grown it
        current = info.partitions if info is not None else 0
        wanted = max(total * bundles, -(-current // bundles) * bundles)
        if wanted > current:
            await self._side.topics.create_partitions(name, wanted)

    async def delete_topic(self, name: str) -> None:
        await self._side.topics.delete_topic(name)

    async def partition(self, topic: str, partition: int) -> Any:
        """`partition` is a queue id of this bundle; its log, while the bundle is owned here
        (checked after the open too, and when an append is acknowledged)."""
        storage_partition = self._side.partition_of(self._bundle, topic, partition)
        return await open_bundle_log(
            self._side.topics, partial(self._side.ownership.bundle_is_local, self._bundle),
            f"bundle {self._bundle} ({self._side.queue_map.broker_name(self._bundle)})",
            topic, storage_partition)

    @property
    def backlog_quotas(self) -> Any:
        """The topic service's backlog quotas (if any), asked about the queue's partition."""
        quotas = getattr(self._side.topics, "backlog_quotas", None)
        return None if quotas is None else _BundleQuotas(quotas, self._side, self._bundle)


class _BundleQuotas:
    def __init__(self, quotas: Any, side: BundleSide, bundle: int) -> None:
        self._quotas = quotas
        self._side = side
        self._bundle = bundle

    async def admit(self, storage_topic: str, queue_id: int) -> Any:
        return await self._quotas.admit(
            storage_topic, self._side.partition_of(self._bundle, storage_topic, queue_id))


class BundleOffsets:
    """OffsetStoreLike of bundle b: (group, RocketMQ topic, queue id) -> the bundle's ledger."""

    def __init__(self, side: BundleSide, bundle: int) -> None:
        self._side = side
        self._bundle = bundle

    def _where(self, topic: str, queue_id: int) -> tuple[RocketMQOffsets, str, int]:
        storage = to_storage(topic)
        partition = self._side.partition_of(self._bundle, storage, queue_id)
        offsets = self._side.offset_ledgers.store(self._bundle)
        if offsets is None:
            raise BundleNotServedError(f"bundle {self._bundle} not served here (offsets)")
        return offsets, storage, partition

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        offsets, storage, partition = self._where(topic, queue_id)
        return offsets.query(group, storage, partition)

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        offsets, storage, partition = self._where(topic, queue_id)
        await offsets.commit(group, storage, partition, offset)

    # listing (admin statistics, gateway/rocketmq/bundle_admin.py): this bundle's offsets only
    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return bundle_committed(self._side, self._bundle, group)

    def groups(self) -> list[str]:
        return bundle_groups(self._side, self._bundle)

    async def remove_group(self, group: str) -> None:
        await remove_bundle_group(self._side, self._bundle, group)


class BundleBroker:
    """The BrokerLike served on port base + b: bundle b as one RocketMQ broker."""

    def __init__(self, side: BundleSide, bundle: int, config: RocketMQBrokerConfig) -> None:
        self.bundle = bundle
        self.config = config
        self._side = side
        self.topics: TopicServiceLike = BundleTopics(side, bundle)  # type: ignore[assignment]
        self.offsets = BundleOffsets(side, bundle)
        self._clients = BundleClients(side.clients)
        self.clients = cast(ClientRegistry, self._clients)
        self.delays = DelayScheduler(self, config.delay_levels)
        self.transactions = BundleTransactions(self, config)
        # what the admin/statistics handlers read (shared, except this broker's own stats)
        self.subscription_groups = side.subscription_groups
        self.client_details = side.client_details
        self.boot_timestamp_ms = side.boot_timestamp_ms
        self.broker_stats = BrokerStats()

    def message_totals(self) -> tuple[int, int]:
        return bundle_message_totals(self._side, self.bundle)

    async def ensure_topic(self, topic: str, queue_nums: int, *,
                           explicit: bool = False) -> TopicInfoLike:
        info = await self._side.ensure_topic(topic, queue_nums, explicit=explicit)
        return translate(info, self._side.queue_map, self.bundle)

    def now_ms(self) -> int:
        return self._side.now_ms()

    def notify_consumers_changed(self, group: str) -> None:
        self._side.notify_consumers_changed(group)

    def listener_bound(self, port: int) -> None:
        pass  # the advertised port is fixed: base + bundle

    def connection_closed(self, conn: Any) -> None:
        self._clients.forget(conn)
        self._side.connection_closed(conn)
