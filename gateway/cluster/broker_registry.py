"""The cluster's metadata layout in the store, and a broker's registration in it.

Layout (created once by `ledgerwire cluster init`, or by the first broker; creating it again
is a no-op, so initialisation is idempotent):

    /ledgerwire/cluster                      JSON {"format", "cluster_id", "bundles",
                                             "group_partitions", "txn_partitions"}
    /ledgerwire/brokers/live/<node id>       ephemeral, JSON {"node_id", "host", "port", "rack",
                                             optional "rocketmq": {"host", "base_port"}}
    /ledgerwire/brokers/draining/<node id>   persistent: this broker must own nothing
    /ledgerwire/ownership/bundles/<bundle>   ephemeral, JSON {"node_id"}: the bundle's owner

The layout node is written once and never changed (bundle counts are fixed for the life of a
cluster: changing them would move every partition at once).  A broker registers with an
ephemeral node; a node left by its own previous process (same id, session not yet expired) is
waited out, never deleted, so two live processes never share an id.

This module must never write a node of another broker, nor change the layout node.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from protocols.kafka.broker_api import BrokerEndpoint

log = logging.getLogger("ledgerwire.cluster")

CLUSTER_PATH = "/ledgerwire/cluster"
LIVE_BROKERS_PATH = "/ledgerwire/brokers/live"
DRAINING_BROKERS_PATH = "/ledgerwire/brokers/draining"
BUNDLES_PATH = "/ledgerwire/ownership/bundles"
LAYOUT_FORMAT = 1


class BrokerRegistrationError(Exception):
    """The broker's id stayed taken by another live process."""


@dataclass(frozen=True)
class ClusterLayout:
    cluster_id: str = "ledgerwire-cluster"
    bundles: int = 16
    group_partitions: int = 8
    txn_partitions: int = 8

    def to_bytes(self) -> bytes:
        return json.dumps({"format": LAYOUT_FORMAT, "cluster_id": self.cluster_id,
                           "bundles": self.bundles, "group_partitions": self.group_partitions,
                           "txn_partitions": self.txn_partitions}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ClusterLayout:
        doc = json.loads(data)
        if doc.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"cluster layout of unknown format {doc.get('format')!r}")
        return cls(str(doc["cluster_id"]), int(doc["bundles"]), int(doc["group_partitions"]),
                   int(doc["txn_partitions"]))


async def init_cluster(store: MetadataStore, wanted: ClusterLayout) -> tuple[ClusterLayout, bool]:
    """Create the layout if absent; returns (the layout in force, whether this call created it)."""
    if wanted.bundles < 1 or wanted.group_partitions < 1 or wanted.txn_partitions < 1:
        raise ValueError("bundles and coordinator partition counts must be >= 1")
    created = False
    try:
        await store.create(CLUSTER_PATH, wanted.to_bytes(), make_parents=True)
        created = True
    except NodeExistsError:
        pass
    for path in (LIVE_BROKERS_PATH, DRAINING_BROKERS_PATH, BUNDLES_PATH):
        try:
            await store.create(path, b"", make_parents=True)
        except NodeExistsError:
            pass
    data, _ = await store.get(CLUSTER_PATH)
    layout = ClusterLayout.from_bytes(data)
    if created:
        log.info("cluster initialised", extra={"layout": layout.to_bytes().decode()})
    return layout, created


def endpoint_to_bytes(endpoint: BrokerEndpoint, extra: Mapping[str, Any] | None = None) -> bytes:
    """The live node's JSON; `extra` adds fields (e.g. "rocketmq") that Kafka readers ignore."""
    doc: dict[str, Any] = {**(extra or {})}
    doc.update({"node_id": endpoint.node_id, "host": endpoint.host, "port": endpoint.port,
                "rack": endpoint.rack})
    return json.dumps(doc).encode()


def endpoint_from_bytes(data: bytes) -> BrokerEndpoint:
    return endpoint_from_doc(json.loads(data))


def endpoint_from_doc(doc: Mapping[str, Any]) -> BrokerEndpoint:
    return BrokerEndpoint(int(doc["node_id"]), str(doc["host"]), int(doc["port"]),
                          doc.get("rack"))


async def register_broker(store: MetadataStore, me: BrokerEndpoint, *,
                          wait_s: float = 60.0, extra: Mapping[str, Any] | None = None,
                          replace: bool = False) -> None:
    """Create this broker's ephemeral live node, waiting out a stale one of the same id; with
    `replace`, rewrite the node this session holds (e.g. to say it is leaving)."""
    path = f"{LIVE_BROKERS_PATH}/{me.node_id}"
    if replace:
        _, stat = await store.get(path)
        await store.set(path, endpoint_to_bytes(me, extra), stat.version)
        return
    waiting = False
    with trio.move_on_after(wait_s):
        while True:
            try:
                await store.create(path, endpoint_to_bytes(me, extra), ephemeral=True,
                                   make_parents=True)
                log.info("broker registered", extra={"node_id": me.node_id,
                                                     "advertised": f"{me.host}:{me.port}"})
                return
            except NodeExistsError:
                if not waiting:  # one line, not one per try
                    waiting = True
                    log.warning("broker id %d is still registered (previous session?); "
                                "waiting for it to expire", me.node_id)
                await trio.sleep(0.5)
    raise BrokerRegistrationError(f"broker id {me.node_id} stayed registered for {wait_s} s")


async def deregister_broker(store: MetadataStore, node_id: int) -> None:
    try:
        await store.delete(f"{LIVE_BROKERS_PATH}/{node_id}")
    except NoNodeError:
        pass


async def read_live_brokers(store: MetadataStore) -> dict[int, BrokerEndpoint]:
    try:
        names = await store.children(LIVE_BROKERS_PATH)
    except NoNodeError:
        return {}
    live: dict[int, BrokerEndpoint] = {}
    for name in names:
        try:
            data, _ = await store.get(f"{LIVE_BROKERS_PATH}/{name}")
        except NoNodeError:
            continue
        endpoint = endpoint_from_bytes(data)
        live[endpoint.node_id] = endpoint
    return live


async def read_live_registrations(store: MetadataStore) -> dict[int, dict[str, Any]]:
    """node id -> the whole JSON of its live node (extra fields included)."""
    try:
        names = await store.children(LIVE_BROKERS_PATH)
    except NoNodeError:
        return {}
    docs: dict[int, dict[str, Any]] = {}
    for name in names:
        try:
            data, _ = await store.get(f"{LIVE_BROKERS_PATH}/{name}")
            doc = json.loads(data)
            docs[int(doc["node_id"])] = doc
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue
    return docs


async def read_draining(store: MetadataStore) -> set[int]:
    try:
        return {int(n) for n in await store.children(DRAINING_BROKERS_PATH) if n.isdigit()}
    except NoNodeError:
        return set()


async def set_draining(store: MetadataStore, node_id: int, draining: bool) -> None:
    """Mark (or unmark) a broker as draining: the assignment gives it no bundle."""
    path = f"{DRAINING_BROKERS_PATH}/{node_id}"
    try:
        if draining:
            await store.create(path, b"", make_parents=True)
        else:
            await store.delete(path)
    except (NodeExistsError, NoNodeError):
        pass


async def read_bundle_owners(store: MetadataStore) -> dict[int, int]:
    """bundle -> owner node id, for every owned bundle."""
    try:
        names = await store.children(BUNDLES_PATH)
    except NoNodeError:
        return {}
    owners: dict[int, int] = {}

    async def read(name: str) -> None:
        try:
            data, _ = await store.get(f"{BUNDLES_PATH}/{name}")
        except NoNodeError:
            return
        owners[int(name)] = int(json.loads(data)["node_id"])

    async with trio.open_nursery() as nursery:
        for name in names:
            if name.isdigit():
                nursery.start_soon(read, name)
    return owners
