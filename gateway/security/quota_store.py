"""Kafka client quotas in the metadata store, and the meters that throttle clients by them.

All quotas live in one node, /ledgerwire/client-quotas, as JSON {"format": 1, "entries":
[[[[type, name], ...], {key: value}], ...]}, changed only by compare-and-set on its version;
each broker caches the table and `run()` reloads it when the node changes.  The rules (entity
precedence, enforced keys, the meter) are protocols/kafka/client_quotas.py's; this module keeps
one meter per (entity, key) for this broker, as Kafka does: a quota is per broker.

`throttle_s(principal, client_id, key, amount)` records `amount` bytes against the client's
quota and says how long to throttle it (0 without a quota).

This module must never write the node without a version check, or do I/O in `throttle_s`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable

import trio

from ledger_backend.faults import log_failure
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from protocols.kafka.client_quotas import Entity, RateMeter, entity_of, resolve

log = logging.getLogger("ledgerwire.quotas")

QUOTAS_PATH = "/ledgerwire/client-quotas"
QUOTAS_FORMAT_VERSION = 1
_CAS_ATTEMPTS = 20
Table = dict[Entity, dict[str, float]]


def _encode(table: Table) -> bytes:
    entries = [[[list(c) for c in entity], values] for entity, values in table.items() if values]
    return json.dumps({"format": QUOTAS_FORMAT_VERSION, "entries": entries}).encode()


def _decode(data: bytes) -> Table:
    if not data:
        return {}
    doc = json.loads(data)
    if doc.get("format") != QUOTAS_FORMAT_VERSION:
        raise ValueError(f"client quota node: unknown format {doc.get('format')}")
    return {entity_of((str(t), None if n is None else str(n)) for t, n in entity):
            {str(k): float(v) for k, v in values.items()}
            for entity, values in doc.get("entries", [])}


class QuotaStore:
    """The cluster's client quotas (persisted) and this broker's meters."""

    def __init__(self, store: MetadataStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self.table: Table = {}
        self._meters: dict[tuple[Entity, str], RateMeter] = {}

    async def load(self) -> None:
        try:
            data, _stat = await self._store.get(QUOTAS_PATH)
        except NoNodeError:
            self.table = {}
            return
        self.table = _decode(data)

    async def alter(self, changes: Iterable[tuple[Entity, dict[str, float | None]]]) -> None:
        """Set (a value) or remove (None) keys of entities, atomically, by CAS."""
        wanted = list(changes)
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = await self._store.get(QUOTAS_PATH)
                table, version = _decode(data), stat.version
            except NoNodeError:
                table, version = {}, -2
            for entity, ops in wanted:
                values = table.setdefault(entity, {})
                for key, value in ops.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if not values:
                    del table[entity]
            try:
                if version == -2:
                    await self._store.create(QUOTAS_PATH, _encode(table), make_parents=True)
                else:
                    await self._store.set(QUOTAS_PATH, _encode(table), version)
            except (BadVersionError, NodeExistsError):
                continue
            self.table = table
            return
        raise MetadataError("the client quota node kept changing; giving up")

    def throttle_s(self, principal: str, client_id: str, key: str, amount: float) -> float:
        """Record `amount` against the client's quota for `key`; seconds to throttle it."""
        if not self.table:
            return 0.0
        found = resolve(self.table, principal.partition(":")[2], client_id, key)
        if found is None:
            return 0.0
        entity, quota = found
        meter = self._meters.get((entity, key))
        if meter is None:
            meter = self._meters[(entity, key)] = RateMeter()
        now = self._clock()
        meter.record(amount, now)
        return meter.throttle_s(quota, now)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reload whenever the node changes (start in the broker's background nursery); a lost
        ZooKeeper session ends the watch, which is then set up again (never the broker's end)."""
        started = False
        while True:
            try:
                async with self._store.watch(QUOTAS_PATH) as watcher:
                    await self.load()
                    if not started:
                        started = True
                        task_status.started()
                    async for _event in watcher:
                        try:
                            await self.load()
                        except (MetadataError, ValueError):
                            log_failure(log, "reloading client quotas failed")
                return
            except MetadataError:
                if not started:
                    raise
                log_failure(log, "client quota watch ended; watching again")
                await trio.sleep(1.0)
