"""RocketMQ in a cluster broker: one RocketMQ broker per ownership bundle, and a name server
whose routes follow bundle ownership.

RocketMQ 4.x per-queue requests carry topic + queue id but no broker name, so queue ids must be
stable per (broker name, address).  Hence each ownership bundle b is one RocketMQ broker,
"<cluster name>-b<b>" (broker id 0, a master), served at the owner's advertised RocketMQ host
and port `base + b`.  Every cluster broker binds all ports base..base+bundles-1 at start; a
connection on port base+b talks to `BundleBroker` b (gateway/rocketmq/bundle_broker.py), whose
topics, queues and offsets are those of bundle b (queue i of topic T = the i-th partition of T
placed in bundle b, protocols/rocketmq/queue_map.py).  While b is owned by another broker,
per-queue requests on that port are forwarded to the owner (gateway/rocketmq/forwarding.py:
clients keep stale routes up to 30 s); with no owner reachable they are answered
SERVICE_NOT_AVAILABLE "bundle not served here", which producers retry on another
queue.  Bundle ports are bound with
SO_REUSEPORT: when a broker dies or leaves, a survivor on the same host binds its ports too and
serves them the same way (gateway/rocketmq/adoption.py), so clients holding the dead address
reach the new owners at their next connect instead of at their route refresh.

Configuration: rocketmq.broker_listener is the *base* port (bundle b on base + b, all bound at
start, so it must not be 0); rocketmq.advertised_host / advertised_port (0: the base port) are
what routes name; rocketmq.name_server_listener serves routes computed from ownership, so any
broker's name server answers for the whole cluster.  The workers of one `standalone --workers N`
node (gateway/process/supervisor.py) each bind the node's name server port with SO_REUSEPORT
(`shared_name_server`): the kernel spreads connections over them, and while one restarts the
others answer.

The owner's RocketMQ host and base port are published in its live registration node
("rocketmq": {"host", "base_port"}); every broker reads them (`follow_registrations`) to answer
routes for bundles owned elsewhere.  Consumer offsets are kept per bundle, keyed by (group,
storage topic, partition), in the ledger `__system/offsets/__rocketmq_offsets-b<b>`: loaded
when the bundle is acquired and closed before it is released (a BundleExtension).  The client
registry (heartbeats, consumer lists, queue locks) is one per process, shared by all ports.
Subscription-group configs are the cluster's (the shared metadata store); statistics and
offset listings are each bundle broker's own (gateway/rocketmq/bundle_admin.py).

Retry, dead-letter, delay and transaction topics are bundle-pinned (gateway/cluster/ownership.py):
what bundle b's broker writes to them stays in bundle b, and b's owner runs b's delay scheduler
and transaction service (gateway/rocketmq/bundle_services.py), started after b's offsets are
loaded and stopped before they close.  Topics created through RocketMQ get a multiple of
`bundles` partitions (queue_map.BundleQueueMap.cluster_partitions).

This module must never open a partition of a bundle this broker does not own (opening fences
the real owner), and never acknowledge an offset commit for such a partition.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import time
from functools import partial
from typing import Any, cast

import trio

from gateway.cluster.broker_registry import read_live_registrations
from gateway.cluster.bundle_placement import bundle_of, is_bundle_pinned
from gateway.cluster.ownership import OwnershipService
from gateway.config.settings import RocketMQConfig, parse_host_port
from gateway.rocketmq.adoption import PortAdoption, RocketMQAddress, claimed_by_another
from gateway.rocketmq.bundle_admin import ClusterBacklogOffsets
from gateway.rocketmq.bundle_broker import BundleBroker, RocketMQOffsetLedgers
from gateway.rocketmq.bundle_logs import BundleNotServedError
from gateway.rocketmq.bundle_services import run_bundle_services
from gateway.rocketmq.forwarding import BundleRequestRouter, RequestForwarder
from gateway.rocketmq.listener import serve_rocketmq_broker, serve_rocketmq_name_server
from gateway.rocketmq.service import (
    ConsumerChangeNotifier,
    ensure_storage_topic,
    register_backlog_offsets,
)
from gateway.rocketmq.setup import connection_limits, listener_limits, rocketmq_guard
from gateway.rocketmq.subscription_groups import SubscriptionGroupStore
from gateway.topics.topic_service import TopicService
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata.store import MetadataError, MetadataStore
from protocols.kafka.errors import InvalidPartitionsError
from protocols.rocketmq.access import AuthorizerLike
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicInfoLike, TopicServiceLike
from protocols.rocketmq.client_details import ClientDetails
from protocols.rocketmq.client_registry import ClientRegistry
from protocols.rocketmq.errors import MessageIllegalError
from protocols.rocketmq.name_server import NameServer, NameServerConfig
from protocols.rocketmq.queue_map import BundleQueueMap

log = logging.getLogger("ledgerwire.rocketmq.cluster")

REGISTRATION_KEY = "rocketmq"
REGISTRATION_REFRESH_S = 5.0
_WILDCARD = ("", "0.0.0.0", "::")


class ClusterRocketMQ(ConsumerChangeNotifier):
    """Everything RocketMQ in one cluster broker (see the module docstring)."""

    def __init__(self, config: RocketMQConfig, topics: TopicService, ownership: OwnershipService,
                 store: MetadataStore, factory: ManagedLedgerFactory,
                 ledger_config: ManagedLedgerConfig, *, authorizer: AuthorizerLike | None = None,
                 secured: bool = False) -> None:
        self.config = config
        # as in the standalone: the Kafka ACLs on a secured broker, else [rocketmq.acl]
        self.acl = rocketmq_guard(config, topics, authorizer=authorizer, secured=secured)
        self.connections = connection_limits(config)  # one count for every RocketMQ port
        self.topics = topics
        self.ownership = ownership
        self._store = store
        self.bind_host, self.base_port = parse_host_port(config.broker_listener)
        if self.base_port <= 0:
            raise ValueError("a cluster broker needs a fixed rocketmq.broker_listener port: "
                             "bundle b is served on that port + b")
        self.advertised_host = config.advertised_host or (
            self.bind_host if self.bind_host not in _WILDCARD else "127.0.0.1")
        self.advertised_base = config.advertised_port or self.base_port
        # the node's workers share one name server port (see the module docstring)
        self.shared_name_server = False
        bundles = ownership.layout.bundles
        self.queue_map = BundleQueueMap(config.cluster_name, bundles, bundle_of, self.address_of,
                                        is_bundle_pinned)
        base = RocketMQBrokerConfig(
            cluster_name=config.cluster_name, advertised_host=self.advertised_host,
            auto_create_topics=config.auto_create_topics,
            default_queue_nums=config.default_queue_nums,
            max_reconsume_times=config.max_reconsume_times, delay_levels=config.delay_levels,
            transaction_check_timeout_s=config.transaction_check_timeout_s,
            transaction_check_interval_s=config.transaction_check_interval_s,
            transaction_max_checks=config.transaction_max_checks)
        self.clients = ClientRegistry(base.client_expiry_s, base.lock_expiry_s)
        self.offset_ledgers = RocketMQOffsetLedgers(factory, ledger_config)
        topics.deletion_hooks.append(self.offset_ledgers.topic_deleted)
        self.subscription_groups = SubscriptionGroupStore(store)  # one per cluster, shared
        self.client_details = ClientDetails()
        self.boot_timestamp_ms = int(time.time() * 1000)
        self.brokers = [
            BundleBroker(self, b, dataclasses.replace(
                base, broker_name=self.queue_map.broker_name(b),
                advertised_port=self.advertised_base + b))
            for b in range(bundles)]
        self.name_server = NameServer(
            cast(TopicServiceLike, topics), list,
            NameServerConfig(config.auto_create_topics, config.default_queue_nums),
            queue_map=self.queue_map)
        self.forwarder = RequestForwarder(base.max_frame_bytes)
        self.adoption = PortAdoption(
            ownership.me.node_id, RocketMQAddress(self.advertised_host, self.advertised_base),
            self.bind_host, bundles, self._serve_bundle)
        self.adoptions = [self.adoption]  # and the 5.x gRPC ports' (cluster_grpc.py)
        self._registrations: dict[int, dict[str, Any]] = {}
        self._create_lock = trio.Lock()
        self._services: dict[int, tuple[trio.CancelScope, trio.Event]] = {}
        self._bundle_locks: dict[int, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None
        self._running = trio.Event()

    # --- bundles (a BundleExtension of the cluster broker) ------------------------------------

    async def acquired(self, bundle: int) -> None:
        """Load the bundle's offsets, then start its delay scheduler and transaction service.

        Serialised with `releasing` per bundle: a release that ran first (a lost ZooKeeper
        session releases from its own task) leaves nothing for this acquisition to do."""
        async with self._bundle_lock(bundle):
            if not self.ownership.holds_bundle(bundle):
                return
            await self.offset_ledgers.acquired(bundle)
            if bundle in self._services:
                return
            await self._start_services(bundle)

    def _bundle_lock(self, bundle: int) -> trio.Lock:
        return self._bundle_locks.setdefault(bundle, trio.Lock())

    async def _start_services(self, bundle: int) -> None:
        await self._running.wait()
        assert self._nursery is not None
        scope, done = trio.CancelScope(), trio.Event()
        self._services[bundle] = (scope, done)
        self._nursery.start_soon(self._run_services, bundle, scope, done)

    async def _run_services(self, bundle: int, scope: trio.CancelScope,
                            done: trio.Event) -> None:
        try:
            with scope:
                await run_bundle_services(self.brokers[bundle], self.ownership.bundle_is_local)
        finally:
            done.set()

    async def releasing(self, bundle: int) -> None:
        """Stop the bundle's services (they write through its logs), then close its offsets."""
        async with self._bundle_lock(bundle):
            entry = self._services.pop(bundle, None)
            if entry is not None:
                entry[0].cancel()
                await entry[1].wait()
            await self.offset_ledgers.releasing(bundle)

    async def close(self) -> None:
        for bundle in sorted(self._services):
            await self.releasing(bundle)
        await self.offset_ledgers.close_all()

    def __repr__(self) -> str:
        return "ClusterRocketMQ"

    # --- routes ------------------------------------------------------------------------------

    def registration(self) -> dict[str, object]:
        """What this broker adds to its live node (ownership.registration_extra)."""
        return {REGISTRATION_KEY: {"host": self.advertised_host,
                                   "base_port": self.advertised_base}}

    def address_of(self, bundle: int) -> str | None:
        owner = self.ownership.bundle_owner(bundle)
        if owner is None:
            return None
        if owner.node_id == self.ownership.me.node_id:
            return f"{self.advertised_host}:{self.advertised_base + bundle}"
        doc = self._registrations.get(owner.node_id, {}).get(REGISTRATION_KEY)
        if not isinstance(doc, dict):
            return None  # the owner serves no RocketMQ (or we have not read it yet)
        return f"{doc['host']}:{int(doc['base_port']) + bundle}"

    def owner_registration(self, bundle: int, key: str, mine: dict[str, object]) -> object:
        """What `bundle`'s owner published under `key` in its live node (`mine` when this
        broker owns it; None when no owner is known)."""
        owner = self.ownership.bundle_owner(bundle)
        if owner is None:
            return None
        if owner.node_id == self.ownership.me.node_id:
            return mine.get(key)
        return self._registrations.get(owner.node_id, {}).get(key)

    async def refresh_registrations(self) -> None:
        self.registrations_seen(await read_live_registrations(self._store))

    def registrations_seen(self, registrations: dict[int, dict[str, Any]]) -> None:
        """The live registrations as just read (here or by an ownership round, which tells
        them before it loads the bundles it takes: adopting a gone broker's ports then lets
        its clients' requests wait for the load instead of being refused until it is done)."""
        self._registrations = registrations
        if self._nursery is not None:  # a gone broker's ports are served here (adoption.py)
            for adoption in self.adoptions:
                adoption.follow(self._registrations, self._nursery)

    async def follow_registrations(self) -> None:
        """Keep the other brokers' RocketMQ addresses current (after every ownership round)."""
        while True:
            changed = self.ownership.changed
            try:
                await self.refresh_registrations()
            except MetadataError as exc:
                log.debug("reading registrations failed: %r", exc)
            with trio.move_on_after(REGISTRATION_REFRESH_S):
                await changed.wait()

    # --- what bundle brokers share ------------------------------------------------------------

    def partition_of(self, bundle: int, storage_topic: str, queue_id: int) -> int:
        """The partition queue `queue_id` of `bundle` names; refused unless owned here."""
        info = self.topics.topics().get(storage_topic)
        if info is None:
            raise MessageIllegalError(f"topic {storage_topic} unknown")
        partition = self.queue_map.partition_of(storage_topic, info.partitions, bundle, queue_id)
        if partition is None:
            raise MessageIllegalError(
                f"queueId[{queue_id}] is illegal for broker {self.queue_map.broker_name(bundle)}")
        if not self.ownership.bundle_is_local(bundle):
            raise BundleNotServedError(
                f"bundle {bundle} ({self.queue_map.broker_name(bundle)}) not served here; "
                "refresh the topic route")
        return partition

    async def ensure_topic(self, topic: str, queue_nums: int, *,
                           explicit: bool = False) -> TopicInfoLike:
        """Like RocketMQBroker.ensure_topic, with the cluster's partition count.  A
        bundle-pinned topic a one-process standalone created with fewer (it gives each bundle
        none or some of `queue_nums` queues) is grown to it."""
        partitions = self.queue_map.cluster_partitions(topic, queue_nums)
        async with self._create_lock:
            info = await ensure_storage_topic(self.topics, topic, partitions, explicit=explicit)
            if info.partitions < partitions and is_bundle_pinned(topic):
                try:
                    await self.topics.create_partitions(topic, partitions)
                    log.info("grew %s from %d to %d partitions (a queue in each bundle)",
                             topic, info.partitions, partitions)
                except InvalidPartitionsError:
                    pass  # another worker grew it first
                fresh = await self.topics.refresh_topic(topic)
                if fresh is not None:
                    return fresh  # type: ignore[return-value]
            return info

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # --- running -----------------------------------------------------------------------------

    async def serve(self, servers: trio.Nursery, *, name_server: bool = True) -> None:
        """Bind every bundle's port and (unless told not to) the name server; each returns
        once it accepts.  The ports are bound with SO_REUSEPORT (another broker adopts them
        when this one is gone, gateway/rocketmq/adoption.py), so a live broker advertising
        the same address is refused here as the bind would have refused it."""
        mine = RocketMQAddress(self.advertised_host, self.advertised_base)
        other = claimed_by_another(await read_live_registrations(self._store),
                                   self.ownership.me.node_id, mine)
        if other is not None:
            raise OSError(errno.EADDRINUSE, f"rocketmq ports {self.advertised_host}:"
                          f"{self.advertised_base}+bundle are broker {other}'s")
        for broker in self.brokers:
            await servers.start(self._serve_bundle, broker.bundle, self.bind_host,
                                self.base_port + broker.bundle)
        if name_server:
            await self.serve_name_server(servers)

    async def _serve_bundle(self, bundle: int, host: str, port: int,
                            task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve bundle `bundle`'s broker on host:port (its own port, or one adopted)."""
        broker = self.brokers[bundle]
        router = BundleRequestRouter(
            bundle, self.forwarder, self.ownership.bundle_is_local, self.address_of,
            f"{self.advertised_host}:{self.advertised_base + bundle}",
            lambda: self.ownership.changed, acl=self.acl, broker=broker)
        await serve_rocketmq_broker(broker, host, port, acl=self.acl, router=router,
                                    reuse_port=True, task_status=task_status,
                                    **listener_limits(self.config, self.connections))

    async def serve_name_server(self, servers: trio.Nursery) -> None:
        """Serve routes (the cluster broker calls it once registered: a broker that does not
        know the others yet would route every queue to itself)."""
        ns_host, ns_port = parse_host_port(self.config.name_server_listener)
        ns = await servers.start(partial(serve_rocketmq_name_server, self.name_server, ns_host,
                                         ns_port, guard=self.acl,
                                         reuse_port=self.shared_name_server,
                                         **listener_limits(self.config, self.connections)))
        log.info("rocketmq cluster brokers ready", extra={
            "bundle_ports": f"{self.base_port}-{self.base_port + len(self.brokers) - 1}",
            "advertised": f"{self.advertised_host}:{self.advertised_base}+bundle",
            "name_server": f"{ns.host}:{ns.port}"})

    async def run(self) -> None:
        """Background work: registrations of the other brokers, client expiry, and the
        services of the bundles owned here."""
        try:  # before the first pull: a disabled group must not be served as enabled
            await self.subscription_groups.reload()
        except Exception:  # the follower below keeps trying
            log.warning("subscription groups not loaded yet", exc_info=True)
        observers = self.ownership.registration_observers
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._running.set()
                observers.append(self.registrations_seen)
                nursery.start_soon(self.follow_registrations)
                nursery.start_soon(self.forwarder.run)
                nursery.start_soon(self._expire_clients)
                nursery.start_soon(self.subscription_groups.follow)
                register_backlog_offsets(self.topics, ClusterBacklogOffsets(self))
        finally:
            self._nursery = None
            if self.registrations_seen in observers:
                observers.remove(self.registrations_seen)
