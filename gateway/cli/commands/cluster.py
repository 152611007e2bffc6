"""`ledgerwire cluster init|status`: create the cluster's metadata layout (idempotent), or show
live brokers, bundle owners, bookies and under-replicated ledgers."""

from __future__ import annotations

import argparse
import json
from typing import Any

import trio

from gateway.cli.commands.broker import add_cluster_layout_arguments, layout_from_args

NAME = "cluster"
HELP = "initialise (idempotent) or inspect a cluster's metadata"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("init", "status"))
    parser.add_argument("--metadata", required=True, help="zk://host:port/chroot")
    add_cluster_layout_arguments(parser)


async def cluster_status(store: Any) -> dict[str, Any]:
    from gateway.cluster.broker_registry import (
        CLUSTER_PATH,
        ClusterLayout,
        read_bundle_owners,
        read_draining,
        read_live_brokers,
    )
    from ledger_backend.autorecovery.under_replication import list_underreplicated
    from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
    from ledger_backend.metadata.store import NoNodeError

    try:
        layout = ClusterLayout.from_bytes((await store.get(CLUSTER_PATH))[0])
    except NoNodeError:
        return {"initialised": False}
    try:
        bookies = await store.children(AVAILABLE_BOOKIES_PATH)
    except NoNodeError:
        bookies = []
    live = await read_live_brokers(store)
    return {
        "initialised": True,
        "layout": json.loads(layout.to_bytes()),
        "brokers": {str(i): f"{b.host}:{b.port}" for i, b in sorted(live.items())},
        "draining": sorted(await read_draining(store)),
        "bundle_owners": {str(b): o for b, o in sorted((await read_bundle_owners(store)).items())},
        "bookies": bookies,
        "underreplicated_ledgers": await list_underreplicated(store),
    }


async def _main(args: argparse.Namespace) -> int:
    from gateway.cluster.broker_registry import init_cluster
    from ledger_backend.autorecovery.under_replication import ensure_layout
    from ledger_backend.metadata import open_store

    store = await open_store(args.metadata)
    try:
        if args.action == "init":
            layout, created = await init_cluster(store, layout_from_args(args))
            await ensure_layout(store)
            state = "created" if created else "already initialised"
            print(f"cluster {layout.cluster_id}: {state} "
                  f"({layout.bundles} bundles, {layout.group_partitions} group partitions, "
                  f"{layout.txn_partitions} transaction partitions)")
        else:
            print(json.dumps(await cluster_status(store), indent=2))
    finally:
        await store.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return trio.run(_main, args)
