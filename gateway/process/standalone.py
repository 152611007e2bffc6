"""`ledgerwire standalone`: one process holding a broker, its bookies and the metadata store.

Everything lives under one data directory:

    <data_dir>/metadata/       the embedded metadata store
    <data_dir>/bookies/<i>/    bookie i's journal, entry logs and index

The bookies are real bookie servers on loopback ports (the ledger client reaches them over
TCP exactly as it would in a cluster), so the standalone shape exercises the same code paths
as a cluster does. Shutdown runs in the reverse order of start-up: stop accepting Kafka
connections and drain them, close every partition's ledger (so the next start needs no
recovery), then checkpoint and close the bookies, then the metadata store.
"""

from __future__ import annotations

import logging
import signal
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import trio

from gateway.admin.api import AdminContext
from gateway.admin.listener import admin_auth, admin_tls, announce
from gateway.admin.metrics import BrokerMetrics
from gateway.admin.read_tickets import ReadTicketIssuer
from gateway.admin.routes import serve_admin_api
from gateway.config.listen_errors import naming_listener
from gateway.config.settings import Config
from gateway.coordinator.partitioned_offsets import PartitionedOffsetStore, node_layout
from gateway.coordinator.single_ledger_migration import move_single_ledgers
from gateway.delivery.delivery_service import DeliveryService
from gateway.delivery.group_configs import ShareGroupConfigs
from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.dynamic_configs import serve_dynamic_configs
from gateway.kafka.listener import serve_kafka
from gateway.kafka.local_transactions import LocalTransactionCoordinators, partition_logs
from gateway.kafka.share_dead_letters import LocalDeadLetters
from gateway.kafka.share_groups import SHARE_STATE_LEDGER_PREFIX, ShareGroups
from gateway.process.gc_policy import settle_heap
from gateway.process.local_bookies import start_local_bookies
from gateway.replication.service import ReplicationService
from gateway.rocketmq.held_layout import held_layout, move_held_messages
from gateway.rocketmq.offset_layout import merge_bundles
from gateway.rocketmq.setup import build_rocketmq
from gateway.security.admin_tokens import TokenStore
from gateway.security.quota_store import QuotaStore
from gateway.security.setup import setup_kafka_security
from gateway.security.tenant_authorizer import TenantAuthorizer
from gateway.topics.backlog_quota import BacklogQuotas
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.offload_service import offloader_from_config
from gateway.topics.retention_policies import RetentionPolicies
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from ledger_backend.secret_files import make_private_dir, read_secret_file
from protocols.kafka.consumer_group_coordinator import ConsumerGroupConfig
from protocols.kafka.group_coordinator import CoordinatorConfig, GroupCoordinator
from protocols.kafka.share_group_coordinator import ShareGroupConfig

log = logging.getLogger("ledgerwire.standalone")


def collect_with_topics(topics: TopicService, groups: Any, share_groups: ShareGroups) -> None:
    """What the groups keep per topic goes when the topic is deleted here, as Kafka's group
    coordinator drops a deleted topic's offsets and share-group state: a topic created again
    under the name starts with neither, and a churn of topics leaves nothing behind."""
    async def offsets(info: TopicInfo) -> None:
        await groups.forget_topic(info.name)

    async def share_state(info: TopicInfo) -> None:
        await share_groups.topic_deleted(info.name, info.partitions)

    topics.deletion_hooks += [offsets, share_state]


def system_ledger_config(config: Config) -> ManagedLedgerConfig:
    """Internal logs (committed offsets): replicated like topics, never trimmed by age."""
    s = config.storage
    return ManagedLedgerConfig(
        ensemble_size=s.ensemble_size,
        write_quorum=s.write_quorum,
        ack_quorum=s.ack_quorum,
        max_entries_per_ledger=s.max_entries_per_ledger,
        max_ledger_bytes=s.max_ledger_mb << 20,
        max_ledger_age_s=s.max_ledger_age_s,
    )


def topic_service_config(config: Config) -> TopicServiceConfig:
    k, s = config.kafka, config.storage
    return TopicServiceConfig(
        default_partitions=k.default_partitions,
        auto_create_topics=k.auto_create_topics,
        retention_ms=config.retention.retention_ms,
        retention_bytes=config.retention.retention_bytes,
        max_message_bytes=k.max_message_bytes,
        ensemble_size=s.ensemble_size,
        write_quorum=s.write_quorum,
        ack_quorum=s.ack_quorum,
        max_entries_per_ledger=s.max_entries_per_ledger,
        max_ledger_bytes=s.max_ledger_mb << 20,
        max_ledger_age_s=s.max_ledger_age_s,
        offload=config.offload,
        idle_unload_s=s.partition_idle_unload_s,
        max_open_partitions=s.max_open_partitions,
    )


def ledger_password(config: Config) -> bytes | None:
    """storage.ledger_password_file's password (a WARNING if others can read the file)."""
    path = config.storage.ledger_password_file
    return read_secret_file(path, "ledger password").encode() if path else None


async def run_standalone(
    config: Config, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Run until SIGINT/SIGTERM (or cancellation), then shut down gracefully."""
    started = trio.current_time()
    make_private_dir(config.data_dir)  # metadata (credentials), journals, ledgers
    bookie_secret = BookieSecret.load(config.storage.bookie_secret or None,
                                      config.storage.bookie_secret_file or None)
    bookie_tls = BookieTls(config.storage.bookie_tls_certfile, config.storage.bookie_tls_keyfile,
                           config.storage.bookie_tls_cafile)  # fmt: skip
    async with AsyncExitStack() as stack:
        store = await open_store(f"embedded:{config.data_dir / 'metadata'}")
        stack.push_async_callback(store.close)

        bookkeeper = await stack.enter_async_context(
            BookKeeper(store, local_bookies=True, bookie_secret=bookie_secret,
                       bookie_tls=bookie_tls, ledger_password=ledger_password(config),
                       entry_mac=config.storage.entry_mac))

        async def active_ledgers() -> set[int]:
            return set(await bookkeeper.list_ledgers())

        local_bookies = await start_local_bookies(config, store, stack, active_ledgers,
                                                  bookie_secret, bookie_tls)

        factory = ManagedLedgerFactory(
            store, bookkeeper, offloader=offloader_from_config(config.offload, config.data_dir),
            offload_cache_bytes=config.offload.cache_mb << 20)
        topics = TopicService(store, factory, topic_service_config(config))
        await topics.load()
        namespaces = NamespaceRegistry(store, config.admin.default_namespace,
                                       data_dir=config.data_dir)
        await namespaces.load()
        topics.namespaces = namespaces
        stack.push_async_callback(topics.close)
        # One coordinator-partition layout for every worker count (partitioned_offsets.py);
        # a data directory from before has its single ledgers moved into it first.
        layout = await node_layout(store)
        await move_single_ledgers(factory, system_ledger_config(config), layout)
        offset_store = PartitionedOffsetStore(factory, system_ledger_config(config),
                                              layout.group_partitions)
        stack.push_async_callback(offset_store.close)
        transaction_logs = partition_logs(factory, system_ledger_config(config),
                                          layout.txn_partitions)
        for transaction_log in transaction_logs:
            stack.push_async_callback(transaction_log.close)
        share_groups = ShareGroups(
            lambda settings_for: DeliveryService(factory, system_ledger_config(config),
                                                 settings_for=settings_for,
                                                 ledger_prefix=SHARE_STATE_LEDGER_PREFIX),
            ShareGroupConfigs(store),
            ShareGroupConfig(
                heartbeat_interval_ms=config.kafka.group_share_heartbeat_interval_ms,
                session_timeout_ms=config.kafka.group_share_session_timeout_ms,
            ),
            dead_letters=LocalDeadLetters(topics),
        )
        stack.push_async_callback(share_groups.close)

        # Background work stops before the logs it writes to are closed.
        background = await stack.enter_async_context(trio.open_nursery())
        stack.callback(background.cancel_scope.cancel)
        background.start_soon(topics.run_retention)
        background.start_soon(topics.run_unloader)
        background.start_soon(topics.compaction.run)
        background.start_soon(topics.offload.run)
        # namespaces/policies changed elsewhere reach this process (and its open partitions)
        background.start_soon(namespaces.follow, topics.reapply_configs)
        coordinator = GroupCoordinator(
            offset_store,
            CoordinatorConfig(
                initial_rebalance_delay_s=config.kafka.group_initial_rebalance_delay_ms / 1000.0,
                offsets_retention_s=config.kafka.offsets_retention_minutes * 60.0,
                consumer_groups=ConsumerGroupConfig(
                    heartbeat_interval_s=config.kafka.group_consumer_heartbeat_interval_ms / 1000,
                    session_timeout_s=config.kafka.group_consumer_session_timeout_ms / 1000,
                ),
            ),
        )
        await background.start(coordinator.run)
        collect_with_topics(topics, coordinator, share_groups)
        transactions = LocalTransactionCoordinators(store, transaction_logs, topics, coordinator)
        await background.start(transactions.run)
        await background.start(share_groups.run)
        security = await setup_kafka_security(config, store)
        await background.start(security.acls.run)
        quotas = QuotaStore(store)
        await background.start(quotas.run)

        authorizer = TenantAuthorizer(security.authorizer, namespaces)
        adv_host, adv_port = config.kafka_advertised
        broker = KafkaBroker(
            topics,
            KafkaBrokerConfig(
                broker_id=config.kafka.broker_id,
                advertised_host=adv_host,
                advertised_port=adv_port,
                cluster_id=config.kafka.cluster_id,
                log_dir=str(config.data_dir.resolve()),
                auto_create_topics=config.kafka.auto_create_topics,
                default_partitions=config.kafka.default_partitions,
                max_message_bytes=config.kafka.max_message_bytes,
                retention_ms=config.retention.retention_ms,
                retention_bytes=config.retention.retention_bytes,
                max_frame_bytes=config.kafka.max_frame_bytes,
                max_pre_auth_frame_bytes=config.kafka.sasl_max_receive_bytes,
                max_partitions_per_request=config.kafka.max_partitions_per_request,
                failed_authentication_delay_s=config.kafka.failed_authentication_delay_ms / 1000,
                connections_max_reauth_ms=config.kafka.connections_max_reauth_ms,
                max_connections=config.kafka.max_connections,
                max_connections_per_ip=config.kafka.max_connections_per_ip,
                fetch_max_bytes=config.kafka.fetch_max_bytes,
                drain_timeout_s=config.kafka.shutdown_grace_s,
            ),
            group_coordinator=coordinator,
            transaction_coordinator=transactions,
            authorizer=authorizer,
            credentials=security.credentials,
            quotas=quotas,
            share_groups=share_groups,
        )
        broker.delegation_tokens = security.delegation_tokens
        if security.delegation_tokens is not None:
            background.start_soon(security.delegation_tokens.run_purge,
                                  config.security.delegation_token_expiry_check_interval_ms / 1000)
        await background.start(serve_dynamic_configs, store, broker, topics)
        broker_metrics = BrokerMetrics()
        broker.request_observer = broker_metrics.observe_request
        admin = AdminContext(store, topics, namespaces, coordinator, broker_metrics,
                             local_bookies, config.kafka.broker_id, f"{adv_host}:{adv_port}",
                             retention=RetentionPolicies(topics, namespaces, coordinator),
                             tokens=TokenStore(store), share_groups=share_groups,
                             read_tickets=ReadTicketIssuer(store, topics, bookie_secret))
        background.start_soon(admin.retention.run)
        backlog_quotas = BacklogQuotas(topics, namespaces, coordinator)
        topics.backlog_quotas = backlog_quotas  # the produce/send handlers ask it
        admin.retention.backlog = backlog_quotas
        background.start_soon(backlog_quotas.run)
        admin.replication = ReplicationService(store, topics, namespaces, config.replication,
                                               coordinator)
        await background.start(admin.replication.run)
        rocketmq = None
        if config.rocketmq.enabled:
            # offsets a `--workers N` run left per bundle (gateway/rocketmq/offset_layout.py),
            # then the messages it held per bundle (gateway/rocketmq/held_layout.py)
            held = await held_layout(store, layout.bundles, 1)
            await merge_bundles(factory, system_ledger_config(config), layout.bundles)
            await move_held_messages(store, factory, system_ledger_config(config), topics,
                                     config.rocketmq.delay_levels, held, 1)
            rocketmq = await build_rocketmq(config.rocketmq, topics, factory,
                                            system_ledger_config(config), stack, background,
                                            authorizer=authorizer, secured=config.secured)
        bind_host, bind_port = config.kafka_bind
        # Catch signals from here on, so that a SIGTERM right after "ready" is a clean stop.
        signals = stack.enter_context(trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM))
        async with trio.open_nursery() as servers:
            with naming_listener("Kafka listener", config.kafka.listener, "kafka.listener",
                                 "--kafka-listener"):
                await servers.start(partial(serve_kafka, broker, bind_host, bind_port,
                                            ssl_context=security.ssl_context,
                                            sasl_mechanisms=security.sasl_mechanisms,
                                            ssl_principal=security.ssl_principal))
            if rocketmq is not None:
                await rocketmq.serve(servers)
            admin.ready = True
            auth = admin_auth(config, store, security.credentials,
                              TenantAuthorizer(security.authorizer, namespaces))
            with naming_listener("admin API", config.admin_listener(), "admin.listener",
                                 "--admin-listener"):
                admin_port = await servers.start(partial(
                    serve_admin_api, admin, config.admin_listener(), auth,
                    ssl_context=admin_tls(config)))
            announce(config, auth, admin_port)
            log.info(
                "ledgerwire standalone ready",
                extra={
                    "kafka": f"{bind_host}:{bind_port}",
                    "advertised": f"{adv_host}:{adv_port}",
                    "bookies": config.storage.bookies,
                    "admin_port": admin_port,
                    "data_dir": str(config.data_dir),
                    "startup_s": round(trio.current_time() - started, 3),
                },
            )
            settle_heap()  # start-up's heap frozen, the collector's thresholds (gc_policy.py)
            task_status.started()
            async for signum in signals:
                log.info("shutting down", extra={"signal": signal.Signals(signum).name})
                break
            # serve_kafka drains in-flight requests when cancelled, within its grace period.
            servers.cancel_scope.cancel()
        log.info("kafka listener stopped; closing ledgers and bookies")
    log.info("ledgerwire standalone stopped")
