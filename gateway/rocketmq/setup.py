"""Assemble the RocketMQ side of a broker process: the broker service and its name server.

Both protocols share the topic service, so a partition has one offset space whichever protocol
wrote it; RocketMQ consumer offsets live in their own ledger-backed store. This module only
builds and starts; it must never hold protocol logic (that is protocols/rocketmq and
gateway/rocketmq/service.py).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import cast

import trio

from gateway.config.settings import RocketMQConfig, parse_host_port
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.listener import serve_rocketmq_broker, serve_rocketmq_name_server
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQBroker
from gateway.topics.topic_service import TopicService
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.rocketmq.acl import PlainAclValidator
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicServiceLike
from protocols.rocketmq.name_server import NameServer, NameServerConfig

_WILDCARD = ("", "0.0.0.0", "::")


@dataclass
class RocketMQSide:
    broker: RocketMQBroker
    name_server: NameServer
    config: RocketMQConfig
    acl: PlainAclValidator | None = None  # [rocketmq.acl] enabled: checked on the broker

    async def serve(self, servers: trio.Nursery) -> None:
        """Start both listeners in `servers` (each returns once it accepts)."""
        rb_host, rb_port = parse_host_port(self.config.broker_listener)
        ns_host, ns_port = parse_host_port(self.config.name_server_listener)
        await servers.start(partial(serve_rocketmq_broker, self.broker, rb_host, rb_port,
                                    acl=self.acl))
        await servers.start(partial(serve_rocketmq_name_server, self.name_server, ns_host, ns_port))


async def build_rocketmq(
    r: RocketMQConfig,
    topics: TopicService,
    factory: ManagedLedgerFactory,
    ledger_config: ManagedLedgerConfig,
    stack: AsyncExitStack,
    background: trio.Nursery,
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
    background.start_soon(broker.run)  # delays, transaction check-back, client expiry
    name_server = NameServer(
        cast(TopicServiceLike, topics),  # TopicService is one; mypy trips on TopicInfo's fields
        lambda: [broker.endpoint()],
        NameServerConfig(r.auto_create_topics, r.default_queue_nums),
    )
    return RocketMQSide(broker, name_server, r, rocketmq_acl(r, topics))


def rocketmq_acl(r: RocketMQConfig, topics: TopicService) -> PlainAclValidator | None:
    """The plain-ACL validator when [rocketmq.acl] is enabled (standalone and cluster alike);
    tenants come from the topic service's namespace registry."""
    if not r.acl.enabled:
        return None
    return PlainAclValidator.from_config(r.acl.accounts, r.acl.global_white_remote_addresses,
                                         getattr(topics, "namespaces", None))
