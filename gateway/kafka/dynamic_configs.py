"""Dynamic broker configs applied to a running broker: the Kafka broker's limits and the topic
service's defaults follow the shared store (gateway/config/dynamic_brokers.py).

`serve_dynamic_configs` loads the stored state, hands the store to the broker (the config
handlers read and alter it there) and then follows it until cancelled, applying every new
state at once: `KafkaBroker.apply_dynamic_configs` (message.max.bytes, log.retention.*) and
`TopicService.set_broker_defaults` (topic-config defaults, re-applied to open partitions).

This module must never write the store: only the AlterConfigs handlers change it.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from gateway.config.dynamic_brokers import DynamicBrokerConfigStore
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka.broker_configs import DynamicBrokerConfigs

log = logging.getLogger("ledgerwire.broker_configs")


async def serve_dynamic_configs(store: MetadataStore, broker: Any, topics: Any, *,
                                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Apply the stored dynamic configs now, then every change, until cancelled."""
    dynamic = DynamicBrokerConfigStore(store)
    broker_id = broker.config.broker_id

    async def apply(state: DynamicBrokerConfigs) -> None:
        broker.apply_dynamic_configs({n: v for n, (v, _s) in state.effective(broker_id).items()})
        await topics.set_broker_defaults(
            {n: v for n, (v, _s) in state.topic_defaults(broker_id).items()})
        if state.default or state.brokers:
            log.info("dynamic broker configs applied",
                     extra={"configs": {n: v for n, (v, _s) in state.effective(broker_id).items()}})

    await apply(await dynamic.load())
    broker.dynamic_configs = dynamic
    task_status.started()
    await dynamic.follow(apply)
