"""`ledgerwire broker`: one stateless broker of a cluster, on a shared ZooKeeper.

Assembled from the same pieces as `ledgerwire standalone` (TopicService, managed ledgers,
LedgerOffsetStore + GroupCoordinator, KafkaBroker, serve_kafka) minus the bookies (a worker of
`standalone --workers N` serves its share of the node's bookies in-process, see run_broker), plus:

- the cluster layout (created idempotently on first start, gateway/cluster/broker_registry.py);
- the ownership service (gateway/cluster/ownership.py): registration with the advertised listener,
bundle
  ownership, and the hooks that load a bundle's coordinator partitions and open its topic
  partitions (fencing the previous owner) on acquisition, and close them on release;
- a follower of the topic catalogue (topics created or changed by other brokers);
- `ClusterKafkaBroker`: a KafkaBroker whose `ownership` the handlers consult;
- Kafka share groups: membership on the group's coordinator broker, each partition's delivery
  state on the partition's owner (unloaded when its bundle moves, fenced by the next owner);
- the operations side (gateway/process/cluster_services.py): namespaces, Kafka security (TLS, SASL,
  ACLs), retention/TTL on owned partitions, the admin HTTP API with /health, /ready, /metrics.

Shutdown (SIGINT/SIGTERM): stop the Kafka listener (draining requests), release every bundle
(closing ledgers cleanly, so the next owner needs no recovery), deregister, close.

This module must never serve a partition without going through the ownership checks of the
handlers, and never release a bundle before its ledgers are closed.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import trio

from gateway.admin.api import LocalBookie
from gateway.admin.listener import admin_auth, admin_tls, announce
from gateway.admin.read_tickets import ReadTicketIssuer
from gateway.admin.routes import serve_admin_api
from gateway.cluster.bookie_capacity import watch_capacity
from gateway.cluster.broker_registry import ClusterLayout, init_cluster
from gateway.cluster.ownership import OwnershipService
from gateway.cluster.peer_client import PeerClient
from gateway.config.settings import Config
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.delivery.delivery_service import DeliveryService
from gateway.delivery.group_configs import ShareGroupConfigs
from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.cluster_transactions import setup_cluster_transactions
from gateway.kafka.dynamic_configs import serve_dynamic_configs
from gateway.kafka.listener import serve_kafka
from gateway.kafka.share_dead_letters import ClusterDeadLetters
from gateway.kafka.share_groups import (
    SHARE_STATE_LEDGER_PREFIX,
    ShareGroupBundles,
    ShareGroups,
)
from gateway.process.bundle_hooks import BundleHooks
from gateway.process.cluster_services import (
    build_admin,
    keep_running,
    setup_namespaces,
    setup_security,
    start_ops_background,
)
from gateway.process.gc_policy import settle_heap
from gateway.process.local_bookies import start_local_bookies
from gateway.process.standalone import (
    collect_with_topics,
    ledger_password,
    system_ledger_config,
    topic_service_config,
)
from gateway.replication.bundle_hooks import ReplicationBundles
from gateway.replication.service import ReplicationService
from gateway.rocketmq.cluster import ClusterRocketMQ
from gateway.rocketmq.cluster_grpc import ClusterGrpc
from gateway.security.quota_store import QuotaStore
from gateway.topics.offload_service import offloader_from_config
from gateway.topics.quorums import QuorumPolicyFactory
from gateway.topics.topic_service import TopicService
from gateway.topics.topic_store import TOPICS_PATH
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataError, MetadataStore, NoNodeError
from ledger_backend.metadata.zookeeper import DEFAULT_SESSION_TIMEOUT_S, parse_zk_url
from protocols.kafka.broker_api import BrokerEndpoint
from protocols.kafka.group_coordinator import CoordinatorConfig

log = logging.getLogger("ledgerwire.broker")

TOPIC_REFRESH_INTERVAL_S = 10.0


class ClusterKafkaBroker(KafkaBroker):
    """A KafkaBroker that answers only for what it owns (handlers read `ownership`)."""

    def __init__(self, topic_service: Any, config: KafkaBrokerConfig, *,
                 group_coordinator: Any, ownership: OwnershipService, **kwargs: Any) -> None:
        super().__init__(topic_service, config, group_coordinator=group_coordinator, **kwargs)
        self.ownership = ownership


def session_timeout_of(metadata_url: str) -> float:
    """The session timeout the broker asks ZooKeeper for (the lease is a fraction of it).

    The server may negotiate a *longer* session (never shorter unless its maxSessionTimeout
    is below the request, which operators must avoid: the lease would outlive the session)."""
    if metadata_url.startswith("shared:") and "session_timeout_s=" in metadata_url:
        return float(metadata_url.split("session_timeout_s=", 1)[1].split("&", 1)[0])
    if not metadata_url.startswith("zk://"):
        return DEFAULT_SESSION_TIMEOUT_S
    return float(parse_zk_url(metadata_url)[2].get("session_timeout_s",
                                                   DEFAULT_SESSION_TIMEOUT_S))


async def follow_topic_catalogue(store: MetadataStore, topics: TopicService,
                                 namespaces: Any = None) -> None:
    """Keep the topic cache in step with topics created, changed or deleted elsewhere."""
    while True:
        try:
            async with store.watch(TOPICS_PATH, children=True) as watcher:
                await refresh_topics(store, topics, namespaces)
                while True:
                    with trio.move_on_after(TOPIC_REFRESH_INTERVAL_S):
                        await watcher.__anext__()
                    await refresh_topics(store, topics, namespaces)
        except StopAsyncIteration:
            return
        except MetadataError as exc:
            log.debug("topic catalogue watch ended: %r", exc)
            await trio.sleep(0.5)


async def refresh_topics(store: MetadataStore, topics: TopicService,
                         namespaces: Any = None) -> None:
    try:
        names = set(await store.children(TOPICS_PATH))
    except NoNodeError:
        names = set()
    if namespaces is not None and names - set(topics.topics()):
        # A new topic's namespace (made just before it, maybe through another broker) decides
        # its managed ledgers' names: know it before the topic is opened here.
        await namespaces.load()
    for name in names | set(topics.topics()):
        try:
            await topics.refresh_topic(name)
        except Exception:  # one bad topic node must not stop the others
            log_failure(log, "cannot refresh topic %s", name)
    # deleted elsewhere, or deleted and created again (a new topic id): what this broker keeps
    # of the old topic goes, whichever refresh saw it (a request's too)
    await topics.collect_gone_elsewhere()


def kafka_broker_config(config: Config, layout: ClusterLayout) -> KafkaBrokerConfig:
    k = config.kafka
    adv_host, adv_port = config.kafka_advertised
    return KafkaBrokerConfig(
        broker_id=k.broker_id, advertised_host=adv_host, advertised_port=adv_port,
        cluster_id=layout.cluster_id, auto_create_topics=k.auto_create_topics,
        default_partitions=k.default_partitions, max_message_bytes=k.max_message_bytes,
        retention_ms=config.retention.retention_ms,
        retention_bytes=config.retention.retention_bytes,
        max_frame_bytes=k.max_frame_bytes,
        max_pre_auth_frame_bytes=k.sasl_max_receive_bytes,
        max_partitions_per_request=k.max_partitions_per_request,
        failed_authentication_delay_s=k.failed_authentication_delay_ms / 1000,
        connections_max_reauth_ms=k.connections_max_reauth_ms,
        max_connections=k.max_connections,
        max_connections_per_ip=k.max_connections_per_ip,
        fetch_max_bytes=k.fetch_max_bytes, drain_timeout_s=k.shutdown_grace_s,
    )


async def run_broker(config: Config, metadata_url: str, layout: ClusterLayout, *,
                     node_worker: bool = False, bookie_indexes: Sequence[int] = (),
                     node_brokers: Sequence[int] = (),
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run one cluster broker until SIGINT/SIGTERM (or cancellation); `node_worker`: one of
    a `standalone --workers N` node, which shares the node's RocketMQ name server port and
    serves the node's bookies `bookie_indexes` in this process (gateway/process/
    local_bookies.py): its ledger client reaches them without the wire and places new
    ensembles on them first.  They stop after the broker has closed its logs.
    `node_brokers`: the node ids of the node's workers, started together: the bundles one of
    them wins are left to it while it starts (up to cluster.handback_delay_s), rather than
    taken and handed back."""
    async with AsyncExitStack() as stack:
        store = await open_store(metadata_url)
        stack.push_async_callback(store.close)
        layout, _ = await init_cluster(store, layout)
        bookie_secret = BookieSecret.load(config.storage.bookie_secret or None,
                                          config.storage.bookie_secret_file or None)
        if bookie_secret is None:
            log.warning("no storage.bookie_secret_file: this broker reaches bookies "
                           "without authentication (bookies with a secret will refuse it)")
        bookie_tls = BookieTls(config.storage.bookie_tls_certfile,
                               config.storage.bookie_tls_keyfile, config.storage.bookie_tls_cafile)
        bookkeeper = await stack.enter_async_context(
            BookKeeper(store, bookie_secret=bookie_secret, bookie_tls=bookie_tls,
                       ledger_password=ledger_password(config),
                       entry_mac=config.storage.entry_mac,
                       local_bookies=bool(bookie_indexes)))
        served_bookies: list[LocalBookie] = []
        if bookie_indexes:
            async def active_ledgers() -> set[int]:
                return set(await bookkeeper.list_ledgers())

            served_bookies = await start_local_bookies(config, store, stack, active_ledgers,
                                                       bookie_secret, bookie_tls,
                                                       indexes=bookie_indexes)
        factory = ManagedLedgerFactory(
            store, bookkeeper, offloader=offloader_from_config(config.offload, config.data_dir),
            offload_cache_bytes=config.offload.cache_mb << 20)
        ts_config = topic_service_config(config)
        topics_holder: list[TopicService] = []

        def topic_configs(name: str) -> dict[str, str] | None:
            info = topics_holder[0].topics().get(name) if topics_holder else None
            return dict(info.configs) if info is not None else None

        def namespace_of(name: str) -> str:  # as TopicService.managed_ledger_name places it
            registry = topics_holder[0].namespaces if topics_holder else None
            return registry.namespace_of(name) if registry is not None else ts_config.namespace

        topics = TopicService(
            store, QuorumPolicyFactory(factory, namespace_of, topic_configs), ts_config)
        topics_holder.append(topics)
        await topics.load()
        namespaces = await setup_namespaces(store, topics, config)
        stack.push_async_callback(topics.close)

        background = await stack.enter_async_context(trio.open_nursery())
        stack.callback(background.cancel_scope.cancel)
        background.start_soon(keep_running, "topic retention", topics.run_retention)
        background.start_soon(keep_running, "idle partition unloading", topics.run_unloader)
        background.start_soon(keep_running, "log compaction", topics.compaction.run)
        background.start_soon(keep_running, "tiered storage", topics.offload.run)
        background.start_soon(follow_topic_catalogue, store, topics, namespaces)
        background.start_soon(keep_running, "namespace follower",
                              partial(namespaces.follow, topics.reapply_configs))
        security = await setup_security(config, store, namespaces, background)

        hooks = BundleHooks(topics, background)
        k = config.kafka
        adv_host, adv_port = config.kafka_advertised
        broker_config = kafka_broker_config(config, layout)
        # The endpoint is completed once the listener knows its port (advertised port 0).
        ownership = OwnershipService(store, layout, BrokerEndpoint(k.broker_id, adv_host, 0),
                                     session_timeout_s=session_timeout_of(metadata_url),
                                     on_acquired=hooks.acquired, on_releasing=hooks.releasing,
                                     handback_delay_s=config.cluster.handback_delay_s,
                                     expel_refusing=config.cluster.expel_refusing_brokers,
                                     awaited_brokers=node_brokers,
                                     await_s=config.cluster.handback_delay_s)
        groups = ClusterGroupCoordinator(
            factory, system_ledger_config(config), ownership, background,
            CoordinatorConfig(
                initial_rebalance_delay_s=k.group_initial_rebalance_delay_ms / 1000,
                offsets_retention_s=k.offsets_retention_minutes * 60.0,
            ),
        )
        hooks.ownership, hooks.groups = ownership, groups
        ownership.on_awaited = hooks.open_now
        # what `cluster status` compares the live bookies with (a spare bookie or not)
        ownership.registration_extra["ensemble_size"] = config.storage.ensemble_size
        background.start_soon(watch_capacity, store, config.storage.ensemble_size)
        stack.push_async_callback(groups.stop_all)
        rocketmq: ClusterRocketMQ | None = None
        rocketmq_grpc: ClusterGrpc | None = None
        if config.rocketmq.enabled:  # one RocketMQ broker per bundle (gateway/rocketmq/cluster.py)
            rocketmq = ClusterRocketMQ(config.rocketmq, topics, ownership, store, factory,
                                       system_ledger_config(config),
                                       authorizer=security.authorizer, secured=config.secured)
            rocketmq.shared_name_server = node_worker
            hooks.add_extension(rocketmq)  # per-bundle offsets, delay and transaction services
            ownership.registration_extra.update(rocketmq.registration())
            stack.push_async_callback(rocketmq.close)
            if config.rocketmq.grpc_listener:  # RocketMQ 5: bundle b on the gRPC base + b
                rocketmq_grpc = ClusterGrpc(config.rocketmq, rocketmq, factory,
                                            system_ledger_config(config))
                hooks.add_extension(rocketmq_grpc)  # released before the bundle's offsets
                ownership.registration_extra.update(rocketmq_grpc.registration())
                stack.push_async_callback(rocketmq_grpc.close)
        transactions = setup_cluster_transactions(
            stack, store, factory, system_ledger_config(config), topics, groups, ownership,
            hooks, background, k.broker_id, peer_security=security.peers)
        quotas = QuotaStore(store)  # client quotas: one table, each broker meters its own
        await background.start(quotas.run)
        share_peers = PeerClient(f"ledgerwire-broker-{k.broker_id}-share",
                                 security=security.peers)  # dead letters to their owner
        stack.push_async_callback(share_peers.aclose)
        share_groups = ShareGroups(
            lambda settings_for: DeliveryService(factory, system_ledger_config(config),
                                                 settings_for=settings_for,
                                                 ledger_prefix=SHARE_STATE_LEDGER_PREFIX,
                                                 owns=ownership.is_local),
            ShareGroupConfigs(store), is_local=ownership.is_local,
            coordinates=lambda group_id: ownership.coordinator_is_local(0, group_id),
            dead_letters=ClusterDeadLetters(topics, ownership, share_peers))
        stack.push_async_callback(share_groups.close)
        collect_with_topics(topics, groups, share_groups)
        hooks.add_extension(ShareGroupBundles(share_groups, ownership.bundle_of))
        await background.start(share_groups.run)
        broker = ClusterKafkaBroker(topics, broker_config, group_coordinator=groups,
                                    transaction_coordinator=transactions,
                                    ownership=ownership, authorizer=security.authorizer,
                                    credentials=security.kafka.credentials,
                                    quotas=quotas, share_groups=share_groups)
        broker.delegation_tokens = security.kafka.delegation_tokens
        if security.kafka.delegation_tokens is not None:
            background.start_soon(security.kafka.delegation_tokens.run_purge,
                                  config.security.delegation_token_expiry_check_interval_ms / 1000)
        await background.start(serve_dynamic_configs, store, broker, topics)
        ownership_running = False
        admin, retention_scope = build_admin(config, store, topics, namespaces, ownership,
                                             groups, f"{adv_host}:{adv_port}",
                                             lambda: ownership_running)
        broker.request_observer = admin.broker_metrics.observe_request
        # geo-replication: each partition's replicator runs on its owner, moves with it
        admin.replication = ReplicationService(store, admin.topics, namespaces,
                                               config.replication, groups,
                                               owns=ownership.is_local)
        hooks.add_extension(ReplicationBundles(admin.replication, ownership.bundle_of))
        admin.bookies = served_bookies  # their state and disk use in /metrics
        admin.share_groups = share_groups  # metrics and listings of what this broker holds
        admin.read_tickets = ReadTicketIssuer(store, topics, bookie_secret)
        bind_host, bind_port = config.kafka_bind
        async with trio.open_nursery() as servers:
            await servers.start(partial(serve_kafka, broker, bind_host, bind_port,
                                        ssl_context=security.kafka.ssl_context,
                                        sasl_mechanisms=security.kafka.sasl_mechanisms,
                                        ssl_principal=security.kafka.ssl_principal))
            ownership.me = BrokerEndpoint(k.broker_id, adv_host, broker.advertised_port)
            if rocketmq is not None:  # bundle ports now; its name server once registered
                await rocketmq.serve(servers, name_server=False)
                if rocketmq_grpc is not None:
                    await rocketmq_grpc.serve(servers, background)
                background.start_soon(rocketmq.run)
            admin.kafka_address = f"{adv_host}:{broker.advertised_port}"
            # Up before registration, so that /ready says 503 while the broker joins.
            auth = admin_auth(config, store, security.kafka.credentials, security.authorizer)
            admin_port = await servers.start(partial(
                serve_admin_api, admin, config.admin_listener(), auth,
                ssl_context=admin_tls(config)))
            announce(config, auth, admin_port)
            owner_scope = trio.CancelScope()

            async def run_ownership(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                nonlocal ownership_running
                try:
                    with owner_scope:
                        await ownership.run(task_status=task_status)
                finally:
                    ownership_running = False

            await background.start(run_ownership)
            ownership_running = True
            if rocketmq is not None:  # routes only from a broker that knows the others
                await rocketmq.serve_name_server(servers)
            await start_ops_background(admin, retention_scope, background)
            await background.start(admin.replication.run)
            settle_heap()  # start-up's heap frozen, the collector's thresholds (gc_policy.py)
            admin.ready = True
            log.info("ledgerwire broker ready", extra={
                "node_id": k.broker_id, "kafka": f"{bind_host}:{bind_port}",
                "advertised": f"{adv_host}:{broker.advertised_port}",
                "owned_bundles": sorted(ownership.owned_bundles()), "admin_port": admin_port})
            print(f"broker {k.broker_id} ready on {adv_host}:{broker.advertised_port}",
                  flush=True)
            task_status.started(broker)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("shutting down", extra={"signal": signal.Signals(signum).name})
                    break
            # Hand the bundles off while the listeners still answer: what is in flight
            # completes, later requests hear NOT_LEADER_OR_FOLLOWER / "not served here" and
            # go to the new owner at once; only then close the connections.
            admin.ready = False
            owner_scope.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                await ownership.stop()
            log.info("bundles released; closing")
            servers.cancel_scope.cancel()
    log.info("ledgerwire broker stopped")
