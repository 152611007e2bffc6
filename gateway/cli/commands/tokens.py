"""`ledgerwire tokens create|list|revoke`: bearer tokens for the admin HTTP API and console.

    ledgerwire tokens create User:alice --ttl 86400 --description ci --metadata zk://zk:2181/lw
    ledgerwire tokens list --metadata ./data
    ledgerwire tokens revoke 0123456789abcdef --metadata ./data

A token acts as its principal: the ACLs decide what it may do, as for that user over SASL.  The
token text is printed once, at creation; the store keeps only its SHA-256.  --metadata takes a
store URL or a standalone data directory (stopped: a running standalone locks its store; use
`ledgerwire admin tokens ...` through its admin API instead).

This module must never print a token except the one it just created.
"""

from __future__ import annotations

import argparse
import sys

import trio

from gateway.cli.commands.users import store_url
from gateway.security.admin_tokens import TokenError, TokenStore
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataError

NAME = "tokens"
HELP = "create, list or revoke admin API bearer tokens"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tokens_action", required=True)
    create = sub.add_parser("create", help="a new token for a principal (printed once)")
    create.add_argument("principal", help="User:NAME")
    create.add_argument("--ttl", type=int, default=0, help="seconds until it expires (0: never)")
    create.add_argument("--description", default="")
    sub.add_parser("list", help="tokens: id, principal, created, expires")
    revoke = sub.add_parser("revoke", help="delete a token by its id")
    revoke.add_argument("token_id", help="the 16 hex digits after lwt_")
    for p in sub.choices.values():
        p.add_argument("--metadata", required=True, metavar="URL-or-DATA-DIR")


async def _run(args: argparse.Namespace) -> int:
    store = await open_store(store_url(args.metadata))
    try:
        tokens = TokenStore(store)
        if args.tokens_action == "create":
            token, info = await tokens.create(args.principal, ttl_s=args.ttl,
                                              description=args.description)
            print(token)
            print(f"token {info.token_id} for {info.principal} created; it is shown only now",
                  file=sys.stderr)
        elif args.tokens_action == "list":
            for info in await tokens.list():
                print(f"{info.token_id}\t{info.principal}\tcreated_ms={info.created_ms}\t"
                      f"expires_ms={info.expires_ms}\t{info.description}")
        else:
            gone = await tokens.revoke(args.token_id)
            print(f"token {args.token_id}: {'revoked' if gone else 'not found'}")
            return 0 if gone else 1
        return 0
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    try:
        return trio.run(_run, args)
    except (TokenError, OSError, ValueError, MetadataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
