"""`ledgerwire admin drain|undrain BROKER`: move every bundle off a broker (or let it own again).

Draining marks the broker in the metadata store; every broker's ownership service then leaves
it out of the assignment, and the drained broker releases its bundles (closing their ledgers)
so the others take them over without recovery.  `--wait` returns once it owns nothing.
"""

from __future__ import annotations

import argparse
import sys

import trio

NAME = "admin"
HELP = ("operator actions: drain/undrain a broker; tenants, namespaces, topics, groups, bookies, "
        "brokers, policies (through the admin HTTP API, see gateway/admin_cli)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gateway.cli.admin import add_resource_parsers

    sub = parser.add_subparsers(dest="admin_command", required=True)
    for action in ("drain", "undrain"):
        p = sub.add_parser(action, help=f"{action} a broker (cluster metadata store)")
        p.set_defaults(action=action)
        p.add_argument("broker", type=int, help="broker node id")
        p.add_argument("--metadata", required=True, help="zk://host:port/chroot")
        p.add_argument("--wait", type=float, default=0.0, metavar="S",
                       help="wait up to S seconds until the drained broker owns no bundle")
    add_resource_parsers(sub)


async def _main(args: argparse.Namespace) -> int:
    from gateway.cluster.broker_registry import read_bundle_owners, set_draining
    from ledger_backend.metadata import open_store

    store = await open_store(args.metadata)
    try:
        await set_draining(store, args.broker, args.action == "drain")
        print(f"broker {args.broker}: {args.action} requested")
        if args.action == "drain" and args.wait > 0:
            with trio.move_on_after(args.wait):
                while True:
                    owned = [b for b, o in (await read_bundle_owners(store)).items()
                             if o == args.broker]
                    if not owned:
                        print(f"broker {args.broker} owns no bundle")
                        return 0
                    await trio.sleep(0.2)
            print(f"broker {args.broker} still owns bundles after {args.wait} s",
                  file=sys.stderr)
            return 1
    finally:
        await store.close()
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "admin_resource", None):
        from gateway.cli.admin import run_resource

        return run_resource(args)
    return trio.run(_main, args)
