"""`ledgerwire users add|delete|list`: SASL/SCRAM users in the metadata store.

    ledgerwire users add alice --password-stdin --mechanism SCRAM-SHA-512 --metadata zk://zk:2181/lw
    ledgerwire users list --metadata ./data

--metadata takes a store URL (zk://..., embedded:DIR) or a standalone data directory (its
store is DATA_DIR/metadata).  A running standalone holds a lock on its embedded store, so for
a standalone either stop it first or list the users in its configuration ([security] users or
security.users_file), which it applies at start.  Only salted SCRAM hashes are stored; PLAIN
logins are checked against them.

This module must never print or log a password.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

import trio

from gateway.security.credentials import CredentialStore
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataError
from protocols.kafka.sasl import DEFAULT_ITERATIONS, SCRAM_SHA_256, SCRAM_SHA_512

NAME = "users"
HELP = "add, delete or list SASL/SCRAM users"


def store_url(metadata: str) -> str:
    """A store URL from --metadata: URLs pass through; a directory is a standalone data dir."""
    if metadata.startswith(("zk://", "embedded:", "memory:")):
        return metadata
    return f"embedded:{Path(metadata) / 'metadata'}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="users_action", required=True)
    add = sub.add_parser("add", help="create a user or set its password")
    add.add_argument("user")
    add.add_argument("--password", help="the password (prefer --password-stdin)")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from the first line of stdin")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    delete = sub.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("user")
    sub.add_parser("list", help="list users and their mechanisms")
    for p in (add, delete, sub.choices["list"]):
        p.add_argument("--metadata", required=True, metavar="URL-or-DATA-DIR")
        p.add_argument("--mechanism", action="append", dest="mechanisms",
                       choices=[SCRAM_SHA_256, SCRAM_SHA_512],
                       help="SCRAM mechanism (repeatable; default both)")


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass(f"password for {args.user}: ")


async def _run(args: argparse.Namespace, password: str | None) -> int:
    store = await open_store(store_url(args.metadata))
    try:
        credentials = CredentialStore(store)
        mechanisms = tuple(args.mechanisms or (SCRAM_SHA_256, SCRAM_SHA_512))
        if args.users_action == "add":
            assert password is not None
            await credentials.set_password(args.user, password, mechanisms, args.iterations)
            print(f"user {args.user}: {', '.join(mechanisms)} credentials set")
        elif args.users_action == "delete":
            gone = await credentials.delete(args.user, tuple(args.mechanisms)
                                            if args.mechanisms else None)
            print(f"user {args.user}: {'deleted' if gone else 'not found'}")
            return 0 if gone else 1
        else:
            for user, mechs in sorted((await credentials.list_users()).items()):
                print(f"{user}\t{','.join(mechs)}")
        return 0
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    password = None
    if args.users_action == "add":
        password = _password(args)
        if not password:
            print("error: empty password", file=sys.stderr)
            return 2
    try:
        return trio.run(_run, args, password)
    except (OSError, ValueError, MetadataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("hint: a running standalone locks its data directory; stop it, or list users in "
              "its configuration ([security] users / users_file)", file=sys.stderr)
        return 1
