"""RocketMQ consumer offsets of a data directory moved between `--workers 1` and `--workers N`.

The two shapes keep them differently, because RocketMQ clients see different brokers: a
one-process standalone is one RocketMQ broker whose queue i of a topic is its partition i, and
keeps every group's offsets in the single ledger "__system/offsets/__rocketmq_offsets", keyed
(RocketMQ topic, queue id); a `--workers N` node serves each bundle b as a RocketMQ broker of
its own, whose queue ids are the bundle's partitions numbered anew, and keeps each bundle's
offsets in "__system/offsets/__rocketmq_offsets-b<b>" keyed (storage topic, partition)
(gateway/rocketmq/cluster.py).  Both name the same thing: a storage partition's next offset for
a group.  So at start, before anything is served, each shape takes what the other left:

- `--workers N` (the supervisor, before its workers start): the single ledger's entries go to
  the bundle ledger of their partition (bundle_of(storage topic, partition, bundles));
- `--workers 1` (the standalone, before its RocketMQ broker loads): every bundle ledger's
  entries go to the single ledger.

Each target ledger takes its entries over what it holds for the same keys as ONE snapshot
record, and the source ledgers are deleted only after every target's record is durable.  A
crash anywhere repeats the same takes at the next start (nothing was served in between), which
change nothing.  A source that is only partly deleted is taken again, with the same entries.

This module must never delete a source ledger before every target's record is durable.
"""

from __future__ import annotations

import logging

from gateway.cluster.bundle_placement import bundle_of
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.bundle_broker import offsets_ledger_name as bundle_ledger_name
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER
from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.kafka.group_coordinator import CommittedOffset, OffsetKey
from protocols.rocketmq.topic_names import from_storage, to_storage

log = logging.getLogger("ledgerwire.rocketmq.offsets")

Offsets = dict[str, dict[OffsetKey, CommittedOffset]]


async def _load(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                name: str) -> tuple[LedgerOffsetStore, Offsets]:
    store = LedgerOffsetStore(factory, config, ledger_name=name)
    return store, await store.load()


async def _take(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None, name: str,
                offsets: Offsets) -> None:
    store, _ = await _load(factory, config, name)
    try:
        await store.take(offsets)
    finally:
        await store.close()
    crash_point("coordinator_layout.after_partition")


async def _delete(factory: ManagedLedgerFactory, names: list[str]) -> None:
    crash_point("coordinator_layout.before_delete")
    for name in names:
        await factory.delete(name)
        crash_point("coordinator_layout.after_delete")


async def split_into_bundles(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                             bundles: int) -> bool:
    """The single ledger's offsets into the bundle ledgers (`--workers N`); whether any."""
    if not await factory.exists(ROCKETMQ_OFFSETS_LEDGER):
        return False
    single, state = await _load(factory, config, ROCKETMQ_OFFSETS_LEDGER)
    await single.close()
    by_bundle: dict[int, Offsets] = {}
    for group, rows in state.items():
        for (topic, queue_id), offset in rows.items():
            storage = to_storage(topic)
            bundle = bundle_of(storage, queue_id, bundles)
            by_bundle.setdefault(bundle, {}).setdefault(group, {})[(storage, queue_id)] = offset
    for bundle in sorted(by_bundle):
        await _take(factory, config, bundle_ledger_name(bundle), by_bundle[bundle])
    await _delete(factory, [ROCKETMQ_OFFSETS_LEDGER])
    log.info("moved RocketMQ consumer offsets into %d bundle ledgers", len(by_bundle),
             extra={"groups": len(state)})
    return True


async def merge_bundles(factory: ManagedLedgerFactory, config: ManagedLedgerConfig | None,
                        bundles: int) -> bool:
    """Every bundle ledger's offsets into the single ledger (`--workers 1`; `bundles`: the
    node's layout, whose bundle ledgers a `--workers N` run may have left); whether any."""
    names = [bundle_ledger_name(b) for b in range(bundles)
             if await factory.exists(bundle_ledger_name(b))]
    if not names:
        return False
    groups: set[str] = set()
    for name in names:
        source, state = await _load(factory, config, name)
        await source.close()
        groups.update(state)
        await _take(factory, config, ROCKETMQ_OFFSETS_LEDGER, {
            group: {(from_storage(storage), partition): offset
                    for (storage, partition), offset in rows.items()}
            for group, rows in state.items()})
    await _delete(factory, names)
    log.info("moved RocketMQ consumer offsets of %d bundle ledgers into one", len(names),
             extra={"groups": len(groups)})
    return True
