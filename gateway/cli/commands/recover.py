"""`ledgerwire recover --bookie ID | --ledger ID`: re-replicate by hand.

--bookie: every ledger with a fragment on that bookie (its "host:port" id) is re-replicated
to other bookies, open ledgers included (they are fenced and closed first, as BookKeeper's
recover does; their writers roll over to a new ledger).  --ledger: one ledger, replacing every
bookie of its ensembles that is not registered as available.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import trio

from gateway.cli.commands.bookie import add_bookie_security_arguments

if TYPE_CHECKING:
    from ledger_backend.bookie.auth import BookieSecret
    from ledger_backend.bookie.tls import BookieTls

NAME = "recover"
HELP = "re-replicate a lost bookie's ledgers, or one ledger, by hand"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--bookie", help="bookie id (host:port) whose copies are lost")
    target.add_argument("--ledger", type=int, help="ledger id")
    parser.add_argument("--metadata", required=True, help="zk://host:port/chroot")
    parser.add_argument("--skip-open", action="store_true",
                        help="leave the open fragment of open ledgers alone (no fencing)")
    add_bookie_security_arguments(parser)


async def recover(store: object, *, bookie: str | None, ledger: int | None,
                  fence_open: bool = True, bookie_secret: BookieSecret | None = None,
                  bookie_tls: BookieTls | None = None,
                  ledger_password: bytes | None = None) -> list[dict]:  # fmt: skip
    from ledger_backend.autorecovery.fragment_copy import fragments_on, replicate_ledger
    from ledger_backend.client.bookkeeper import BookKeeper

    results: list[dict] = []
    async with BookKeeper(store, bookie_secret=bookie_secret,  # type: ignore[arg-type]
                          bookie_tls=bookie_tls, ledger_password=ledger_password) as bk:
        ctx = bk.context
        available = set(await ctx.available_bookies())
        todo: list[tuple[int, set[str]]] = []
        if ledger is not None:
            metadata, _ = await ctx.read_metadata(ledger)
            named = {b for _, ens in metadata.ensembles for b in ens}
            todo.append((ledger, named - available))
        else:
            assert bookie is not None
            for ledger_id in await ctx.list_ledger_ids():
                try:
                    metadata, _ = await ctx.read_metadata(ledger_id)
                except Exception:  # deleted meanwhile
                    continue
                if fragments_on(metadata, {bookie}):
                    todo.append((ledger_id, {bookie}))
        for ledger_id, lost in todo:
            if not lost:
                results.append({"ledger": ledger_id, "complete": True, "copied": 0})
                continue
            outcome = await replicate_ledger(bk, ledger_id, lost, fence_open=fence_open)
            results.append({"ledger": ledger_id, "complete": outcome.complete,
                            "copied": outcome.entries_copied, "fenced": outcome.fenced,
                            "notes": outcome.notes})
    return results


async def _main(args: argparse.Namespace) -> int:
    from ledger_backend.bookie.__main__ import ledger_password
    from ledger_backend.bookie.auth import BookieSecret
    from ledger_backend.bookie.tls import BookieTls
    from ledger_backend.metadata import open_store

    secret = BookieSecret.load(file=args.bookie_secret_file)
    store = await open_store(args.metadata)
    try:
        results = await recover(store, bookie=args.bookie, ledger=args.ledger,
                                fence_open=not args.skip_open, bookie_secret=secret,
                                bookie_tls=BookieTls.from_args(args),
                                ledger_password=ledger_password(args))
    finally:
        await store.close()
    for line in results:
        print(json.dumps(line))
    complete = all(r["complete"] for r in results)
    print(f"{len(results)} ledgers, {sum(r['copied'] for r in results)} entries copied, "
          f"{'complete' if complete else 'INCOMPLETE'}")
    return 0 if complete else 1


def run(args: argparse.Namespace) -> int:
    return trio.run(_main, args)
