"""Brokers' ownership services on the in-memory metadata store, for the ownership tests
(test_ownership.py, test_peer_liveness.py): each `MemoryBroker` opens its own session of the
memory store named after its cluster (`cluster_name`), so two brokers of one name share the
cluster's nodes as two ZooKeeper sessions would; a session never expires on its own."""

from __future__ import annotations

import itertools
from typing import Any

import trio

from gateway.cluster.broker_registry import ClusterLayout, init_cluster, read_bundle_owners
from gateway.cluster.ownership import OwnershipService
from ledger_backend.metadata import open_store
from protocols.kafka.broker_api import BrokerEndpoint

LAYOUT = ClusterLayout("test", bundles=16, group_partitions=4, txn_partitions=4)
_names = itertools.count()


def cluster_name(prefix: str) -> str:
    """A memory-store name no other test in this process has used."""
    return f"{prefix}-{next(_names)}"


class MemoryBroker:
    """Broker `node_id` of cluster `name`, advertising `port`; `released` lists the bundles it
    gave up.  Cancelling `scope` ends the service but not its session (the store)."""

    def __init__(self, node_id: int, name: str, port: int) -> None:
        self.node_id = node_id
        self.name = name
        self.port = port
        self.released: list[int] = []
        self.service: OwnershipService | None = None
        self.scope = trio.CancelScope()
        self.store: Any = None

    async def run_service(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                          **options: Any) -> None:
        """Open the session, then run the ownership service (`options` are its own) until
        `scope` is cancelled."""
        self.store = await open_store(f"memory:{self.name}")
        await init_cluster(self.store, LAYOUT)

        async def released(bundle: int) -> None:
            self.released.append(bundle)

        self.service = OwnershipService(
            self.store, LAYOUT, BrokerEndpoint(self.node_id, "127.0.0.1", self.port),
            session_timeout_s=10.0, on_releasing=released, **options)
        with self.scope:
            await self.service.run(task_status=task_status)


async def wait_owners(store: Any, want: set[int], timeout_s: float = 30.0) -> dict[int, int]:
    """Every bundle's owner, once every bundle has one and the owners are `want`."""
    with trio.fail_after(timeout_s):
        while True:
            owners = await read_bundle_owners(store)
            if len(owners) == LAYOUT.bundles and set(owners.values()) == want:
                return owners
            await trio.sleep(0.05)
