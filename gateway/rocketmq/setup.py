"""Assemble the RocketMQ side of a broker process: the broker service and its name server.

Both protocols share the topic service, so a partition has one offset space whichever protocol
wrote it; RocketMQ consumer offsets live in their own ledger-backed store. This module only
builds and starts; it must never hold protocol logic (that is protocols/rocketmq and
gateway/rocketmq/service.py).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import trio

from gateway.config.listen_errors import naming_listener
from gateway.config.settings import RocketMQConfig, parse_host_port
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.grpc_backend import GrpcBackend, guard_for_grpc
from gateway.rocketmq.grpc_listener import serve_rocketmq_grpc
from gateway.rocketmq.grpc_receive import GrpcReceiver
from gateway.rocketmq.listener import serve_rocketmq_broker, serve_rocketmq_name_server
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQBroker
from gateway.security.connection_limits import ConnectionLimits
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_service import TopicService
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.rocketmq.access import AuthorizerLike, RocketMQGuard
from protocols.rocketmq.acl import PlainAclValidator
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicServiceLike
from protocols.rocketmq.dispatch import RequestGuard
from protocols.rocketmq.grpc.auth import principal_of
from protocols.rocketmq.name_server import NameServer, NameServerConfig
from protocols.rocketmq.topic_names import from_storage

_WILDCARD = ("", "0.0.0.0", "::")
log = logging.getLogger("ledgerwire.rocketmq")


@dataclass
class RocketMQSide:
    broker: RocketMQBroker
    name_server: NameServer
    config: RocketMQConfig
    acl: RequestGuard | None = None  # see rocketmq_guard: checked on the broker
    grpc: GrpcBackend | None = None  # RocketMQ 5 clients, when grpc_listener is set
    connections: ConnectionLimits | None = None  # shared by the ports (see connection_limits)

    async def serve(self, servers: trio.Nursery) -> None:
        """Start the listeners in `servers` (each returns once it accepts)."""
        rb_host, rb_port = parse_host_port(self.config.broker_listener)
        ns_host, ns_port = parse_host_port(self.config.name_server_listener)
        with naming_listener("RocketMQ broker", self.config.broker_listener,
                             "rocketmq.broker_listener", "--rocketmq-broker-listener"):
            await servers.start(partial(serve_rocketmq_broker, self.broker, rb_host, rb_port,
                                        acl=self.acl,
                                        **listener_limits(self.config, self.connections)))
        with naming_listener("RocketMQ name server", self.config.name_server_listener,
                             "rocketmq.name_server_listener", "--rocketmq-name-server-listener"):
            await servers.start(partial(serve_rocketmq_name_server, self.name_server, ns_host,
                                        ns_port, guard=self.acl,
                                        **listener_limits(self.config, self.connections)))
        if self.grpc is not None:
            g_host, g_port = parse_host_port(self.config.grpc_listener)
            guard = self.grpc.guard
            with naming_listener("RocketMQ 5 gRPC listener", self.config.grpc_listener,
                                 "rocketmq.grpc_listener", "--rocketmq-grpc-listener"):
                await servers.start(partial(
                    serve_rocketmq_grpc, self.grpc, g_host, g_port,
                    authenticate=lambda meta, conn: principal_of(meta, conn, guard),
                    connection_limits=self.connections))


async def build_rocketmq(
    r: RocketMQConfig,
    topics: TopicService,
    factory: ManagedLedgerFactory,
    ledger_config: ManagedLedgerConfig,
    stack: AsyncExitStack,
    background: trio.Nursery,
    *,
    authorizer: AuthorizerLike | None = None,
    secured: bool = False,
) -> RocketMQSide:
    offsets = LedgerOffsetStore(factory, ledger_config, ledger_name=ROCKETMQ_OFFSETS_LEDGER)
    rb_host, rb_port = parse_host_port(r.broker_listener)
    broker = RocketMQBroker(
        topics,
        offsets,
        RocketMQBrokerConfig(
            broker_name=r.broker_name,
            cluster_name=r.cluster_name,
            advertised_host=r.advertised_host
            or (rb_host if rb_host not in _WILDCARD else "127.0.0.1"),
            advertised_port=r.advertised_port or rb_port,
            auto_create_topics=r.auto_create_topics,
            default_queue_nums=r.default_queue_nums,
            max_reconsume_times=r.max_reconsume_times,
            delay_levels=r.delay_levels,
            transaction_check_timeout_s=r.transaction_check_timeout_s,
            transaction_check_interval_s=r.transaction_check_interval_s,
            transaction_max_checks=r.transaction_max_checks,
        ),
    )
    await broker.load()
    stack.push_async_callback(broker.close)  # closes its offsets ledger

    async def forget_offsets(info: TopicInfo) -> None:  # a deleted topic's (service.py)
        await broker.offsets.forget_topic(from_storage(info.name))

    topics.deletion_hooks.append(forget_offsets)
    background.start_soon(broker.run)  # delays, transaction check-back, client expiry
    name_server = NameServer(
        cast(TopicServiceLike, topics),  # TopicService is one; mypy trips on TopicInfo's fields
        lambda: [broker.endpoint()],
        NameServerConfig(r.auto_create_topics, r.default_queue_nums),
    )
    side = RocketMQSide(broker, name_server, r,
                        rocketmq_guard(r, topics, authorizer=authorizer, secured=secured),
                        connections=connection_limits(r))
    if r.grpc_listener:
        delivery = GrpcReceiver.build_delivery(broker, factory, ledger_config)
        stack.push_async_callback(delivery.close)

        async def forget_delivery(info: TopicInfo) -> None:  # SimpleConsumer state
            await delivery.forget_topic(info.name, info.partitions)

        topics.deletion_hooks.append(forget_delivery)
        g_host, g_port = parse_host_port(r.grpc_listener)
        advertised = (r.advertised_host or (g_host if g_host not in _WILDCARD else "127.0.0.1"),
                      g_port)
        receiver = GrpcReceiver(broker, delivery)
        background.start_soon(receiver.run)
        side.grpc = GrpcBackend(broker, receiver, advertised,
                                guard_for_grpc(side.acl))  # type: ignore[arg-type]
    return side


def connection_limits(r: RocketMQConfig) -> ConnectionLimits | None:
    """One count for all RocketMQ ports of this process (None: no limit configured)."""
    if not (r.max_connections or r.max_connections_per_ip):
        return None
    return ConnectionLimits(r.max_connections, r.max_connections_per_ip)


def listener_limits(r: RocketMQConfig, connections: ConnectionLimits | None
                    ) -> dict[str, Any]:  # fmt: skip
    """A 4.x listener's limits: the shared connection count, and for connections not yet
    authenticated [rocketmq.acl]'s pre_auth_* settings."""
    return {"pre_auth_max_frame_bytes": r.acl.pre_auth_max_frame_bytes,
            "pre_auth_timeout_s": r.acl.pre_auth_timeout_ms / 1000,
            "connection_limits": connections}


def rocketmq_guard(r: RocketMQConfig, topics: TopicService, *,
                   authorizer: AuthorizerLike | None = None,
                   secured: bool = False) -> RequestGuard | None:
    """Who may use the RocketMQ ports (standalone and cluster alike).

    On a secured broker (Config.secured: Kafka SASL or ACLs on) a RocketMQGuard: requests
    signed by a [[rocketmq.acl.accounts]] account are User:<access key>, unsigned ones refused
    unless rocketmq.acl.allow_anonymous (User:ANONYMOUS, logged as a warning here), and the
    Kafka authorizer decides every request (protocols/rocketmq/access.py).  Otherwise the
    plain-ACL validator when [rocketmq.acl] is enabled, else nothing (an open broker).
    Tenants come from the topic service's namespace registry."""
    accounts = None
    if r.acl.enabled or r.acl.accounts or r.acl.global_white_remote_addresses:
        accounts = PlainAclValidator.from_config(
            r.acl.accounts, r.acl.global_white_remote_addresses,
            getattr(topics, "namespaces", None))
    if not secured:
        return accounts if r.acl.enabled else None
    if r.acl.allow_anonymous:
        log.warning("rocketmq.acl.allow_anonymous: unsigned RocketMQ requests are accepted as "
                    "User:ANONYMOUS on this secured broker (the Kafka ACLs decide what they "
                    "may do)")
    elif not r.acl.accounts:
        log.warning("the broker is secured and [[rocketmq.acl.accounts]] lists no account: "
                    "every unsigned RocketMQ request is refused")
    return RocketMQGuard(accounts=accounts, plain_permissions=r.acl.enabled,
                         authorizer=authorizer, require_signature=True,
                         allow_anonymous=r.acl.allow_anonymous)
