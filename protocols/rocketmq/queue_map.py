"""Which RocketMQ broker serves which queues of a topic, and which partition a queue id names.

RocketMQ 4.x numbers each broker's queues of a topic 0..n-1 and its per-queue requests (send,
pull, offsets) carry topic + queue id but no broker name, so a queue id only means something
together with the broker (connection) it arrives on.  Two shapes:

- `SingleBrokerQueueMap` (standalone): one broker name serves every partition; queue id =
  partition.
- `BundleQueueMap` (cluster): each ownership bundle b is one RocketMQ broker, named
  "<cluster>-b<b>", served on its owner's RocketMQ base port + b.  Its queues of topic T are
  the partitions p of T with bundle_of(T, p) == b in ascending order (queue ids 0..k-1).
  Adding partitions appends, so existing queue ids keep their partitions.  A route lists only
  bundles with k > 0 and a live owner (`address_of` answers None otherwise).

This module must never do I/O, and must never map a queue id to a partition outside the bundle
the request arrived on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol


@dataclass
class BrokerEndpoint:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str  # host:port as clients should dial it


@dataclass(frozen=True)
class QueueGroup:
    """One broker's queues of a topic in a route."""

    endpoint: BrokerEndpoint
    queues: int


class QueueMap(Protocol):
    def brokers(self) -> list[BrokerEndpoint]:
        """Every broker a client may be routed to now (cluster info)."""
        ...

    def route(self, storage_topic: str, partitions: int) -> list[QueueGroup]:
        """The brokers serving `storage_topic` (of `partitions` partitions) and their queues."""
        ...

    def default_route(self, queue_nums: int) -> list[QueueGroup]:
        """The route of the auto-creation topic TBW102."""
        ...


class SingleBrokerQueueMap:
    """Standalone: every partition on the one broker, queue id = partition."""

    def __init__(self, brokers: Callable[[], list[BrokerEndpoint]]) -> None:
        self._brokers = brokers

    def brokers(self) -> list[BrokerEndpoint]:
        return self._brokers()

    def route(self, storage_topic: str, partitions: int) -> list[QueueGroup]:
        return [QueueGroup(b, partitions) for b in self._brokers()]

    def default_route(self, queue_nums: int) -> list[QueueGroup]:
        return [QueueGroup(b, queue_nums) for b in self._brokers()]


@lru_cache(maxsize=4096)
def _placement(storage_topic: str, partitions: int, bundles: int,
               bundle_of: Callable[[str, int, int], int]) -> tuple[tuple[int, ...], ...]:
    by_bundle: list[list[int]] = [[] for _ in range(bundles)]
    for p in range(partitions):
        by_bundle[bundle_of(storage_topic, p, bundles)].append(p)
    return tuple(tuple(ps) for ps in by_bundle)


class BundleQueueMap:
    """Cluster: bundle b = broker "<cluster>-b<b>" (see the module docstring).

    `bundle_of(topic, partition, bundles)` is the ownership placement (a module-level function,
    so placements can be cached); `address_of(bundle)` the host:port clients dial for the
    bundle now, or None while it has no live owner."""

    def __init__(self, cluster_name: str, bundles: int,
                 bundle_of: Callable[[str, int, int], int],
                 address_of: Callable[[int], str | None],
                 pinned: Callable[[str], bool] = lambda topic: False) -> None:
        if bundles < 1:
            raise ValueError("bundles must be >= 1")
        self.cluster_name = cluster_name
        self.bundles = bundles
        self._bundle_of = bundle_of
        self._address_of = address_of
        self._pinned = pinned

    def broker_name(self, bundle: int) -> str:
        return f"{self.cluster_name}-b{bundle}"

    def bundle_of_broker_name(self, name: str) -> int | None:
        prefix = f"{self.cluster_name}-b"
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            bundle = int(name[len(prefix):])
            return bundle if bundle < self.bundles else None
        return None

    def partitions_in_bundle(self, storage_topic: str, partitions: int,
                             bundle: int) -> tuple[int, ...]:
        """The partitions bundle `bundle` serves, in queue-id order."""
        return _placement(storage_topic, partitions, self.bundles, self._bundle_of)[bundle]

    def queue_count(self, storage_topic: str, partitions: int, bundle: int) -> int:
        return len(self.partitions_in_bundle(storage_topic, partitions, bundle))

    def partition_of(self, storage_topic: str, partitions: int, bundle: int,
                     queue_id: int) -> int | None:
        owned = self.partitions_in_bundle(storage_topic, partitions, bundle)
        return owned[queue_id] if 0 <= queue_id < len(owned) else None

    def queue_of(self, storage_topic: str, partitions: int, partition: int) -> tuple[int, int]:
        """(bundle, queue id) of a partition."""
        bundle = self._bundle_of(storage_topic, partition, self.bundles)
        return bundle, self.partitions_in_bundle(storage_topic, partitions, bundle).index(partition)

    def _endpoint(self, bundle: int) -> BrokerEndpoint | None:
        address = self._address_of(bundle)
        if address is None:
            return None
        return BrokerEndpoint(self.cluster_name, self.broker_name(bundle), 0, address)

    def brokers(self) -> list[BrokerEndpoint]:
        return [e for b in range(self.bundles) if (e := self._endpoint(b)) is not None]

    def route(self, storage_topic: str, partitions: int) -> list[QueueGroup]:
        groups = []
        for bundle, owned in enumerate(_placement(storage_topic, partitions, self.bundles,
                                                  self._bundle_of)):
            if owned and (endpoint := self._endpoint(bundle)) is not None:
                groups.append(QueueGroup(endpoint, len(owned)))
        return groups

    def default_route(self, queue_nums: int) -> list[QueueGroup]:
        # An auto-created topic gets a multiple of `bundles` partitions (cluster_queue_nums),
        # so every bundle holds the same share of it: any of them can take the first send.
        per_bundle = max(1, -(-queue_nums // self.bundles))
        return [QueueGroup(e, per_bundle) for e in self.brokers()]

    def cluster_partitions(self, storage_topic: str, queue_nums: int) -> int:
        """Partitions a topic created through RocketMQ gets.  A bundle-pinned (internal) topic
        gets `queue_nums` queues in *every* bundle (queue i of bundle b = partition i*B + b),
        like RocketMQ creating it on each broker; any other topic `cluster_queue_nums`."""
        if self._pinned(storage_topic):
            return max(1, queue_nums) * self.bundles
        return self.cluster_queue_nums(queue_nums)

    def cluster_queue_nums(self, queue_nums: int) -> int:
        """Partitions a topic created through RocketMQ gets: `queue_nums` rounded up to a
        multiple of `bundles` (each bundle then serves queue_nums / bundles of them)."""
        return max(1, -(-queue_nums // self.bundles)) * self.bundles
