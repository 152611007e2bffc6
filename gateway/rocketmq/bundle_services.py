"""Per-bundle RocketMQ background services of a cluster broker: delay levels and transactions.

In cluster mode every RocketMQ internal topic is bundle-pinned (gateway/cluster/ownership.py): its
partition p lives in bundle p mod B and each bundle's broker sees `queue_nums` queues of it
(queue i of bundle b = partition i*B + b).  So a delayed message, a consumer's send-back or a
half message received on bundle b's port is held in bundle b, and bundle b's owner runs the
delay scheduler (gateway/rocketmq/delays.py) and the transaction service
(gateway/rocketmq/transactions.py) over bundle b's broker view, exactly the standalone code.
They start when the bundle is acquired (after its offsets ledger loaded: their scan positions
live there) and stop before it is released.  A service waits until its internal topic exists,
so a cluster that never delays or transacts opens none of those partitions.

`BundleClients` remembers which producers heartbeat through this bundle's port: a check-back
of bundle b's half message must go on such a connection, since the producer answers
END_TRANSACTION on the connection the check came on.

This module must never run a bundle's services while the bundle is not owned here.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from gateway.rocketmq.delays import DelayScheduler
from gateway.rocketmq.transactions import TransactionService
from ledger_backend.faults import log_failure
from protocols.rocketmq.client_registry import ClientRegistry
from protocols.rocketmq.errors import SystemBusyError
from protocols.rocketmq.topic_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC, to_storage

log = logging.getLogger("ledgerwire.rocketmq.cluster")

TOPIC_POLL_S = 1.0
RESTART_PAUSE_S = 1.0
END_WAIT_S = 10.0


class BundleClients:
    """The process-wide client registry as bundle b's broker sees it (see the docstring)."""

    def __init__(self, shared: ClientRegistry) -> None:
        self._shared = shared
        self._producers: dict[str, dict[str, Any]] = {}  # group -> client id -> connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)

    def heartbeat(self, connection: Any, data: dict[str, Any], now: float) -> set[str]:
        client_id = str(data.get("clientID") or "")
        for producer in data.get("producerDataSet") or []:
            group = str(producer.get("groupName") or "") if isinstance(producer, dict) else ""
            if group and client_id:
                self._producers.setdefault(group, {})[client_id] = connection
        return self._shared.heartbeat(connection, data, now)

    def unregister(self, client_id: str, producer_group: str | None,
                   consumer_group: str | None) -> set[str]:
        if producer_group:
            self._producers.get(producer_group, {}).pop(client_id, None)
        return self._shared.unregister(client_id, producer_group, consumer_group)

    def producer_connections(self, group: str) -> list[Any]:
        return list(self._producers.get(group, {}).values())

    def forget(self, connection: Any) -> None:
        for members in self._producers.values():
            for client_id, conn in list(members.items()):
                if conn is connection:
                    del members[client_id]


class BundleTransactions:
    """Bundle b's transaction service: prepare any time, decisions once its state is loaded."""

    def __init__(self, view: Any, config: Any) -> None:
        self._view = view
        self._config = config
        self.service = self._new_service()
        self.loaded = trio.Event()

    def _new_service(self) -> TransactionService:
        c = self._config
        return TransactionService(self._view, check_timeout_s=c.transaction_check_timeout_s,
                                  check_interval_s=c.transaction_check_interval_s,
                                  max_checks=c.transaction_max_checks)

    async def ensure_topics(self) -> None:
        for topic in (HALF_TOPIC, OP_HALF_TOPIC):
            await self._view.ensure_topic(to_storage(topic), 1)

    async def prepare(self, *args: Any) -> int:
        await self.ensure_topics()
        return await self.service.prepare(*args)

    async def end(self, commit_offset: int, decision: int, **owner: str | None) -> None:
        with trio.move_on_after(END_WAIT_S):
            await self.loaded.wait()
        if not self.loaded.is_set():
            raise SystemBusyError(f"transactions of bundle {self._view.bundle} are loading")
        await self.service.end(commit_offset, decision, **owner)

    async def run(self) -> None:
        """Load the decisions and scan for check-backs (until cancelled: bundle released)."""
        self.service = self._new_service()
        self.loaded = trio.Event()
        try:
            await wait_for_topic(self._view, to_storage(HALF_TOPIC))
            await self.ensure_topics()
            await self.service.load()
            self.loaded.set()
            await self.service.run()
        finally:
            self.loaded = trio.Event()


async def wait_for_topic(view: Any, storage_topic: str) -> None:
    while True:  # created by a first delayed/transactional send, here or on another broker
        if storage_topic in view.topics.topics():
            return
        await trio.sleep(TOPIC_POLL_S)


async def run_delays(view: Any, delays: DelayScheduler) -> None:
    await wait_for_topic(view, to_storage(SCHEDULE_TOPIC))
    await delays.run()


async def run_bundle_services(view: Any, is_local: Any) -> None:
    """Run bundle `view.bundle`'s delay scheduler and transaction service until cancelled;
    each is restarted after an unexpected failure."""
    while True:  # the acquisition hook has not finished yet
        if is_local(view.bundle):
            break
        await trio.sleep(0.1)

    async def keep(name: str, run: Any) -> None:
        while True:
            try:
                await run()
            except Exception:  # a failing service must not take the broker down
                log_failure(log, "bundle %d %s failed; restarting", view.bundle, name)
            await trio.sleep(RESTART_PAUSE_S)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep, "delay scheduler", lambda: run_delays(view, view.delays))
        nursery.start_soon(keep, "transaction service", view.transactions.run)
