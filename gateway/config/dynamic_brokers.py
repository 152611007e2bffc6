"""Dynamic broker configs in the metadata store, shared by every broker of a cluster.

One node, /ledgerwire/config/brokers, holds protocols.kafka.broker_configs.DynamicBrokerConfigs
as JSON (a format number, the cluster default and per-broker overrides); every change is a
compare-and-set on its version.  `follow` keeps a process's copy in step (a store watch, and a
re-read every few seconds in case a watch event is missed) and calls `on_change` with the new
state, which the process applies to its topic service and Kafka broker without a restart; a
change made through this process (`alter`) is applied before `alter` returns.

This module must never interpret the configs (protocols.kafka.broker_configs does) nor write
anything but that one node.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

import trio

from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from protocols.kafka.broker_configs import DynamicBrokerConfigs

log = logging.getLogger("ledgerwire.broker_configs")

DYNAMIC_BROKER_CONFIGS_PATH = "/ledgerwire/config/brokers"
REFRESH_INTERVAL_S = 5.0
_CAS_ATTEMPTS = 20

Update = Callable[[DynamicBrokerConfigs], DynamicBrokerConfigs]


class DynamicBrokerConfigStore:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.current = DynamicBrokerConfigs()
        self._on_change: Callable[[DynamicBrokerConfigs], Awaitable[None]] | None = None
        self._applied: DynamicBrokerConfigs | None = None
        self._apply_lock = trio.Lock()

    async def _apply(self, state: DynamicBrokerConfigs) -> None:
        async with self._apply_lock:
            if self._on_change is not None and state != self._applied:
                await self._on_change(state)
                self._applied = state

    async def _read(self) -> tuple[DynamicBrokerConfigs, int]:
        try:
            data, stat = await self._store.get(DYNAMIC_BROKER_CONFIGS_PATH)
        except NoNodeError:
            return DynamicBrokerConfigs(), -2
        return DynamicBrokerConfigs.from_record(json.loads(data)), stat.version

    async def load(self) -> DynamicBrokerConfigs:
        self.current, _ = await self._read()
        return self.current

    async def alter(self, update: Update) -> DynamicBrokerConfigs:
        """Apply `update` to the stored state by compare-and-set; the new state."""
        for _ in range(_CAS_ATTEMPTS):
            old, version = await self._read()
            new = update(old)
            data = json.dumps(new.to_record(), sort_keys=True).encode()
            try:
                if version == -2:
                    await self._store.create(DYNAMIC_BROKER_CONFIGS_PATH, data, make_parents=True)
                else:
                    await self._store.set(DYNAMIC_BROKER_CONFIGS_PATH, data, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            self.current = new
            await self._apply(new)  # this process at once; the others through their watch
            return new
        raise MetadataError("dynamic broker configs kept changing; giving up")

    async def follow(self, on_change: Callable[[DynamicBrokerConfigs], Awaitable[None]], *,
                     refresh_interval_s: float = REFRESH_INTERVAL_S) -> None:
        """Call `on_change` with every new state (first with the current one) until cancelled."""
        self._on_change = on_change
        while True:
            try:
                async with self._store.watch(DYNAMIC_BROKER_CONFIGS_PATH) as watcher:
                    while True:
                        state, _ = await self._read()
                        self.current = state
                        await self._apply(state)
                        with trio.move_on_after(refresh_interval_s):
                            await watcher.__anext__()
            except StopAsyncIteration:
                return
            except (MetadataError, ValueError) as exc:
                log.warning("dynamic broker configs: %r; retrying", exc)
                await trio.sleep(0.5)
