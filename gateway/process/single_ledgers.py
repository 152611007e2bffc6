"""`standalone --workers N` on a data directory a one-process standalone used before.

Such a directory keeps committed offsets and transaction state in single ledgers, which every
shape now keeps per coordinator partition (gateway/coordinator/single_ledger_migration.py says
why and how they are moved), and RocketMQ consumer offsets in a single ledger, which workers
keep per bundle (gateway/rocketmq/offset_layout.py; a one-process standalone takes them back
into its single ledger at its start). The workers must not start before they are moved: a
worker that loaded partition i (or bundle b) before its entries arrived would serve a group or
transactional id without them. So the supervisor moves them itself, before the first worker
starts, with every bookie of the node in its own process for the time it takes (the single
ledgers may be on any of them), and stops those bookies again before the workers start theirs.
RocketMQ's held messages (delayed, undecided transactional) a one-process standalone left are
moved into the bundles' layout here too (gateway/rocketmq/held_layout.py), before the RocketMQ
offsets holding their scan positions are split.  A directory without single ledgers (the usual
case) costs four metadata reads.

This module must never run while a worker or a bookies process of the node runs.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

from gateway.cluster.broker_registry import ClusterLayout
from gateway.config.settings import Config
from gateway.coordinator.offset_store import KAFKA_OFFSETS_LEDGER
from gateway.coordinator.single_ledger_migration import move_single_ledgers
from gateway.coordinator.transaction_store import TRANSACTION_STATE_LEDGER
from gateway.process.local_bookies import node_bookie_count, start_local_bookies
from gateway.process.standalone import (
    ledger_password,
    system_ledger_config,
    topic_service_config,
)
from gateway.rocketmq.held_layout import held_layout, move_held_messages
from gateway.rocketmq.offset_layout import split_into_bundles
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER
from gateway.topics.offload_service import offloader_from_config
from gateway.topics.topic_service import TopicService
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.managed_ledger.factory import DEFAULT_ROOT
from ledger_backend.managed_ledger.metadata_format import managed_ledger_path
from ledger_backend.metadata import MetadataStore

log = logging.getLogger("ledgerwire.supervisor")


async def has_single_ledgers(store: MetadataStore) -> bool:
    for name in (KAFKA_OFFSETS_LEDGER, TRANSACTION_STATE_LEDGER, ROCKETMQ_OFFSETS_LEDGER):
        if await store.exists(managed_ledger_path(DEFAULT_ROOT, name)) is not None:
            return True
    return False


async def move_before_workers(config: Config, store: MetadataStore, layout: ClusterLayout,
                              workers: int) -> None:
    """Move the data directory's single coordinator ledgers, if it has any (module docstring)."""
    held = await held_layout(store, layout.bundles, layout.bundles)
    if not await has_single_ledgers(store) and held == layout.bundles:
        return
    log.info("moving committed offsets and transaction state into coordinator partitions")
    secret = BookieSecret.load(config.storage.bookie_secret or None,
                               config.storage.bookie_secret_file or None)
    tls = BookieTls(config.storage.bookie_tls_certfile, config.storage.bookie_tls_keyfile,
                    config.storage.bookie_tls_cafile)
    async with AsyncExitStack() as stack:
        bookkeeper = await stack.enter_async_context(
            BookKeeper(store, local_bookies=True, bookie_secret=secret, bookie_tls=tls,
                       ledger_password=ledger_password(config),
                       entry_mac=config.storage.entry_mac))

        async def active_ledgers() -> set[int]:
            return set(await bookkeeper.list_ledgers())

        await start_local_bookies(config, store, stack, active_ledgers, secret, tls,
                                  indexes=range(node_bookie_count(config, workers)))
        factory = ManagedLedgerFactory(
            store, bookkeeper, offloader=offloader_from_config(config.offload, config.data_dir),
            offload_cache_bytes=config.offload.cache_mb << 20)
        stack.push_async_callback(factory.close)
        await move_single_ledgers(factory, system_ledger_config(config), layout)
        if held != layout.bundles:  # before the scan positions move into the bundle ledgers
            topics = TopicService(store, factory, topic_service_config(config))
            await topics.load()
            stack.push_async_callback(topics.close)
            await move_held_messages(store, factory, system_ledger_config(config), topics,
                                     config.rocketmq.delay_levels, held, layout.bundles)
        await split_into_bundles(factory, system_ledger_config(config), layout.bundles)
