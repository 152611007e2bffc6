"""`ledgerwire autorecovery`: an auditor candidate and a replication worker, without a bookie."""

from __future__ import annotations

import argparse
import logging

import trio

from gateway.cli.commands.bookie import (
    add_autorecovery_arguments,
    add_bookie_security_arguments,
    run_autorecovery_process,
)

NAME = "autorecovery"
HELP = "auditor candidate and replication worker for lost bookies"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", required=True, help="zk://host:port/chroot")
    parser.add_argument("--log-level", default="INFO")
    add_autorecovery_arguments(parser)
    add_bookie_security_arguments(parser)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(run_autorecovery_process, args)
    except KeyboardInterrupt:
        return 130
    return 0
