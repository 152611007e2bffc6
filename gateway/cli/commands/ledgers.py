"""`ledgerwire ledgers list|show`: print ledger metadata (state, ensembles, last entry)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import trio

NAME = "ledgers"
HELP = "list ledgers, or show one ledger's metadata"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "show"))
    parser.add_argument("ledger", type=int, nargs="?", help="ledger id (show)")
    parser.add_argument("--metadata", required=True,
                        help="zk://host:port/chroot, or embedded:DIR of a stopped standalone")


def describe(ledger_id: int, metadata: Any) -> dict[str, Any]:
    return {
        "ledger": ledger_id,
        "state": metadata.state.value,
        "last_entry": metadata.last_entry_id,
        "length": metadata.length,
        "quorum": f"{metadata.ensemble_size}/{metadata.write_quorum}/{metadata.ack_quorum}",
        "ensembles": [[first, list(bookies)] for first, bookies in metadata.ensembles],
        "custom": {k: v.decode("utf-8", "replace") for k, v in metadata.custom_metadata.items()},
    }


async def _main(args: argparse.Namespace) -> int:
    from ledger_backend.client.errors import NoSuchLedgerError
    from ledger_backend.client.ledger_metadata import (
        LEDGERS_PATH,
        LedgerMetadata,
        ledger_id_from_node_name,
        ledger_path,
    )
    from ledger_backend.metadata import open_store
    from ledger_backend.metadata.store import NoNodeError

    store = await open_store(args.metadata)
    try:
        if args.action == "show":
            if args.ledger is None:
                print("ledgerwire ledgers show: a ledger id is required")
                return 2
            try:
                data, _ = await store.get(ledger_path(args.ledger))
            except NoNodeError:
                raise NoSuchLedgerError(f"ledger {args.ledger} does not exist") from None
            print(json.dumps(describe(args.ledger, LedgerMetadata.from_json_bytes(data)),
                             indent=2))
            return 0
        try:
            names = await store.children(LEDGERS_PATH)
        except NoNodeError:
            names = []
        for name in names:
            ledger_id = ledger_id_from_node_name(name)
            if ledger_id is None:
                continue
            try:
                data, _ = await store.get(ledger_path(ledger_id))
            except NoNodeError:
                continue
            d = describe(ledger_id, LedgerMetadata.from_json_bytes(data))
            bookies = sorted({b for _, ens in d["ensembles"] for b in ens})
            print(f"{ledger_id}\t{d['state']}\tlast_entry={d['last_entry']}\t"
                  f"quorum={d['quorum']}\tfragments={len(d['ensembles'])}\t"
                  f"bookies={','.join(bookies)}\t{d['custom'].get('managed-ledger', '')}")
    except NoSuchLedgerError as exc:
        print(f"ledgerwire ledgers: {exc}")
        return 1
    finally:
        await store.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return trio.run(_main, args)
