"""`ledgerwire cluster init|status|secure`: create the cluster's metadata layout (idempotent),
show live brokers, bundle owners, bookies and under-replicated ledgers, or put the identity-only
ACL on every node of an existing cluster.

With an identity in the metadata URL (zk://user:password@host/chroot or ?auth_file=PATH) `init`
creates every node for that identity only; `secure` closes a cluster created without one: first
restart every process with the identity in its URL (new nodes are then created closed), then run
`secure` once (it reports how many nodes it changed; running it again changes none)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import trio

from gateway.cli.commands.broker import add_cluster_layout_arguments, layout_from_args

NAME = "cluster"
HELP = "initialise (idempotent) or inspect a cluster's metadata"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("init", "status", "secure"))
    parser.add_argument("--metadata", required=True,
                        help="zk://[user:password@]host:port/chroot[?auth_file=PATH]")
    add_cluster_layout_arguments(parser)


async def cluster_status(store: Any) -> dict[str, Any]:
    from gateway.cluster.bookie_capacity import BookieCapacity
    from gateway.cluster.broker_registry import (
        CLUSTER_PATH,
        ClusterLayout,
        read_bundle_owners,
        read_draining,
        read_live_brokers,
        read_live_registrations,
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
    registrations = await read_live_registrations(store)
    sizes = [int(doc["ensemble_size"]) for doc in registrations.values()
             if isinstance(doc.get("ensemble_size"), int)]
    capacity = BookieCapacity(len(bookies), max(sizes)).to_json() if sizes else None
    return {
        "initialised": True,
        "layout": json.loads(layout.to_bytes()),
        "brokers": {str(i): f"{b.host}:{b.port}" for i, b in sorted(live.items())},
        "draining": sorted(await read_draining(store)),
        "bundle_owners": {str(b): o for b, o in sorted((await read_bundle_owners(store)).items())},
        "bookies": bookies,
        "underreplicated_ledgers": await list_underreplicated(store),
        # live bookies against the largest ensemble a live broker writes with (None: no broker)
        "bookie_capacity": capacity,
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
        elif args.action == "secure":
            return await _secure(store)
        else:
            status = await cluster_status(store)
            print(json.dumps(status, indent=2))
            warning = (status.get("bookie_capacity") or {}).get("warning")
            if warning:
                print(f"warning: {warning}", file=sys.stderr)
    finally:
        await store.close()
    return 0


async def _secure(store: Any) -> int:
    from ledger_backend.metadata.store import MetadataError
    from ledger_backend.metadata.zookeeper import ZooKeeperMetadataStore

    if not isinstance(store, ZooKeeperMetadataStore):
        print("ledgerwire cluster secure: only a ZooKeeper metadata store has ACLs",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        changed = await store.secure_tree()
    except MetadataError as exc:
        print(f"ledgerwire cluster secure: {exc}", file=sys.stderr)
        return 2
    print(f"{changed} nodes now closed to everyone but the cluster identity")
    return 0


def run(args: argparse.Namespace) -> int:
    return trio.run(_main, args)
