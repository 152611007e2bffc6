"""What a broker knows of bundle ownership, and the questions request handlers ask of it.

`OwnershipView` holds this broker's last reading of the cluster (live and departed brokers,
bundle owners, the bundles it holds and has loaded) and answers where a partition or a
coordinator lives, whether this broker serves it now, and waits while a held bundle loads.
`gateway/cluster/ownership.py` (`OwnershipService`) keeps that reading current: it registers,
keeps the lease and reconciles; this module only reads and waits.

`is_local` is a *lease*: it is true only while `_lease_until` (advanced by the service after a
ZooKeeper round trip proved the session alive) lies ahead, so a broker paused past its session
refuses to acknowledge anything the moment it runs again.  A broker answers where a bundle
lives only after its first reconcile (before that it knows no other broker and would send every
client to itself).

This module must never report a bundle as local without a valid lease, and never touch
ZooKeeper.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable

import trio

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import (
    GROUP_TOPIC,
    TXN_TOPIC,
    bundle_of,
    coordinator_partition,
    eligible_brokers,
    is_bundle_pinned,
    target_broker,
)
from protocols.kafka.broker_api import BrokerEndpoint

# a broker that left is still listed to clients this long (or until it is live again): see
# `listed_brokers`
DEPARTED_LISTING_S = 60.0
# a topic named in a Metadata request this recently is in demand on a take-over: a client
# whose partition's broker died asks every second or so until the take-over (a longer window
# let a chaos.py trial's open queue behind the topics of earlier trials, read back since)
ASKED_RECENTLY_S = 5.0

class OwnershipView:
    """This broker's reading of bundle ownership and the answers drawn from it; kept current
    by `OwnershipService` (gateway/cluster/ownership.py)."""

    def __init__(self, layout: ClusterLayout, me: BrokerEndpoint, *,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self.layout = layout
        self.me = me
        self._clock = clock
        self._live: dict[int, BrokerEndpoint] = {me.node_id: me}
        self._departed: dict[int, tuple[BrokerEndpoint, float]] = {}  # left: endpoint, when
        self._reconciled = False  # no answer about other brokers' bundles before the first
        self._draining: set[int] = set()
        self._owners: dict[int, int] = {}  # bundle -> owner node id (last read)
        self._owned: set[int] = set()  # bundles whose node this session holds
        self._ready: set[int] = set()  # owned bundles whose acquire hook finished
        # partitions of owned bundles still loading that were opened (fenced, recovered)
        # after the bundle was acquired: Kafka produce and fetch are served on them at once
        self._opened_early: dict[int, set[tuple[str, int]]] = {}
        self._ready_changed = trio.Event()  # set (and replaced) when a bundle is ready or lost
        self._releasing: set[int] = set()
        self._lease_until = -1.0
        # told (bundle, topic, partition) when a request waits for a partition of a bundle
        # still loading here (see until_local)
        self.on_awaited: Callable[[int, str, int], None] | None = None
        self._asked: dict[str, float] = {}  # topic -> when a client last asked where it lives

    # --- what handlers ask -----------------------------------------------------------------

    def lease_valid(self) -> bool:
        return self._clock() < self._lease_until

    @property
    def answers_clients(self) -> bool:
        """False until the first reconcile: a (re)starting broker knows neither the other
        brokers nor any owner, and a Metadata answer then named no leader for any partition
        and listed itself at port 0 (its endpoint before the listener was bound).  A client
        that reached a broker restarted after a kill -9 while it waited out its old
        registration applied that and stalled until a later answer (chaos.py: 7.7 s)."""
        return self._reconciled

    def live_brokers(self) -> list[BrokerEndpoint]:
        return [self._live[i] for i in sorted(self._live)]

    def listed_brokers(self) -> list[BrokerEndpoint]:
        """The brokers a Metadata answer lists: the live ones and those that left less than
        DEPARTED_LISTING_S ago.  librdkafka (2.x) drops a broker missing from the list in the
        same update that moves its partitions to their new leader, and the dropped broker's
        thread then sets those partitions back to "no leader" (its debug log: "Reverting from
        preferred replica 1 to leader -1"), so they waited for the client's next refresh, up
        to a second more after every broker kill (chaos.py).  A dead broker's node and its
        bundle nodes vanish with the same session, so the survivor names itself leader in the
        very answer that would have dropped the dead broker; listed a while longer, it is just
        a broker the client fails to reach and leads nothing."""
        now = self._clock()
        listed = dict(self._live)
        for node_id, (endpoint, left_at) in self._departed.items():
            if node_id not in listed and now - left_at < DEPARTED_LISTING_S:
                listed[node_id] = endpoint
        return [listed[i] for i in sorted(listed)]

    def note_asked(self, topics: Iterable[str]) -> None:
        """Clients asked where these topics live (a Metadata request naming them): a client
        whose partition's broker died asks every second, so on a take-over they are the
        partitions to open first (`recently_asked`)."""
        now = self._clock()
        for topic in topics:
            self._asked[topic] = now
        if len(self._asked) > 4096:
            self._asked = {t: at for t, at in self._asked.items()
                           if now - at < ASKED_RECENTLY_S}

    def recently_asked(self) -> set[str]:
        now = self._clock()
        return {t for t, at in self._asked.items() if now - at < ASKED_RECENTLY_S}

    def _owner_of_bundle(self, bundle: int) -> BrokerEndpoint | None:
        if bundle in self._owned:
            return self.me
        if not self._reconciled:
            return None  # not registered yet: every guess would name this broker
        owner = self._owners.get(bundle)
        if owner is None or owner == self.me.node_id:
            target = target_broker(bundle, eligible_brokers(set(self._live), self._draining))
            owner = target
        return self._live.get(owner) if owner is not None else None

    def _bundle_is_local(self, bundle: int) -> bool:
        return bundle in self._ready and bundle not in self._releasing and self.lease_valid()

    def bundle_of(self, topic: str, partition: int) -> int:
        return bundle_of(topic, partition, self.layout.bundles)

    def partition_opened(self, bundle: int, topic: str, partition: int) -> None:
        """The broker opened this partition of a bundle it is still loading, after acquiring
        it (the open fenced and recovered the earlier owner's ledgers): from now on
        `serves_partition` is true for it, before the bundle's coordinators and extensions
        are loaded.  Ignored for a bundle this broker does not hold."""
        if self.holds_bundle(bundle) and bundle not in self._ready:
            self._opened_early.setdefault(bundle, set()).add((topic, partition))
            self._wake_ready_waiters()

    def serves_partition(self, topic: str, partition: int) -> bool:
        """Whether Kafka produce and fetch may be served on this topic partition here: its
        bundle is local, or held (lease valid, not releasing) and this partition was opened
        since it was acquired (`partition_opened`).  A plain append or read needs only the
        partition's own log; coordinator partitions, share-group state and transaction
        markers wait for the whole bundle (`is_local`).  A failover's take-over pause is then
        the partition's own open, not the slowest load of its bundle."""
        bundle = self.bundle_of(topic, partition)
        if self._bundle_is_local(bundle):
            return True
        return ((topic, partition) in self._opened_early.get(bundle, ())
                and self.holds_bundle(bundle) and self.lease_valid())

    def bundle_owner(self, bundle: int) -> BrokerEndpoint | None:
        """The live broker owning (or about to own) `bundle`, None if none is live."""
        return self._owner_of_bundle(bundle)

    def bundle_is_local(self, bundle: int) -> bool:
        return self._bundle_is_local(bundle)

    def owner_of(self, topic: str, partition: int) -> BrokerEndpoint | None:
        return self._owner_of_bundle(self.bundle_of(topic, partition))

    def leader_table(self) -> list[int]:
        """Each bundle's owner node id (-1: none live), as `owner_of` answers now: read once
        per Metadata request, so listing 100,000 partitions asks no question per partition."""
        owners = (self._owner_of_bundle(b) for b in range(self.layout.bundles))
        return [owner.node_id if owner is not None else -1 for owner in owners]

    def partition_leaders(self, topic: str, partitions: int,
                          table: list[int]) -> tuple[int, ...]:
        """Every partition's leader from a `leader_table` (the same rule as `bundle_of`)."""
        bundles = len(table)
        base = 0 if is_bundle_pinned(topic) else zlib.crc32(topic.encode("utf-8"))
        return tuple(table[(base + p) % bundles] for p in range(partitions))

    def is_local(self, topic: str, partition: int) -> bool:
        return self._bundle_is_local(self.bundle_of(topic, partition))

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        if key_type == 1:
            return TXN_TOPIC, coordinator_partition(key, self.layout.txn_partitions)
        return GROUP_TOPIC, coordinator_partition(key, self.layout.group_partitions)

    def coordinator_owner(self, key_type: int, key: str) -> BrokerEndpoint | None:
        return self.owner_of(*self.coordinator_unit(key_type, key))

    def coordinator_is_local(self, key_type: int, key: str) -> bool:
        return self.is_local(*self.coordinator_unit(key_type, key))

    def holds_bundle(self, bundle: int) -> bool:
        """This broker holds the bundle's node (also while its acquisition hooks run, before it
        serves requests): what a hook checks after waiting, to not load a bundle it lost."""
        return bundle in self._owned and bundle not in self._releasing

    async def until_ready(self, bundle: int, timeout_s: float) -> bool:
        """Wait while this broker holds `bundle` but still loads it (its acquire hooks fence
        and recover the earlier owner's ledgers); True once it serves the bundle.  A request
        that reaches the new owner in that window waits here instead of failing: clients
        retry a refusal only a few times, and a load after a kill -9 can outlast them."""
        with trio.move_on_after(timeout_s):
            while self.holds_bundle(bundle) and not self._bundle_is_local(bundle):
                await self._ready_changed.wait()
        return self._bundle_is_local(bundle)

    async def until_local(self, topic: str, partition: int, timeout_s: float) -> bool:
        """`until_ready` for a partition's bundle; a partition a request waits for is first
        handed to `on_awaited` (the broker opens it at once, not after the bundle's other
        partitions), so its fencing and recovery overlap the bundle's load."""
        bundle = self.bundle_of(topic, partition)
        if self.on_awaited is not None and self.holds_bundle(bundle) \
                and not self._bundle_is_local(bundle):
            self.on_awaited(bundle, topic, partition)
        return await self.until_ready(bundle, timeout_s)

    async def until_serving(self, topic: str, partition: int, timeout_s: float) -> bool:
        """`until_local` for Kafka produce and fetch: done as soon as `serves_partition`."""
        bundle = self.bundle_of(topic, partition)
        if self.on_awaited is not None and self.holds_bundle(bundle) \
                and not self.serves_partition(topic, partition):
            self.on_awaited(bundle, topic, partition)
        with trio.move_on_after(timeout_s):
            while self.holds_bundle(bundle) and not self.serves_partition(topic, partition):
                await self._ready_changed.wait()
        return self.serves_partition(topic, partition)

    def _drop_bundle(self, bundle: int) -> None:
        """Forget `bundle` as held and ready (lost, released) and wake whoever waits on it."""
        self._owned.discard(bundle)
        self._ready.discard(bundle)
        self._opened_early.pop(bundle, None)
        self._wake_ready_waiters()

    def _wake_ready_waiters(self) -> None:
        old, self._ready_changed = self._ready_changed, trio.Event()
        old.set()

    def owned_bundles(self) -> set[int]:
        return set(self._ready - self._releasing)

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        """The coordinator partitions placed in `bundle`."""
        units = [(GROUP_TOPIC, p) for p in range(self.layout.group_partitions)]
        units += [(TXN_TOPIC, p) for p in range(self.layout.txn_partitions)]
        return [u for u in units if self.bundle_of(*u) == bundle]
