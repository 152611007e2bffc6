"""The `ledgerwire` subcommands, one module each.

A command module defines NAME, HELP, `add_arguments(parser)` and `run(args) -> int`.
To add a command, write its module and list it in COMMAND_MODULES; nothing else changes.
"""

from __future__ import annotations

COMMAND_MODULES: list[str] = [
    "gateway.cli.commands.standalone",
    "gateway.cli.commands.users",
    "gateway.cli.commands.tokens",
    "gateway.cli.commands.broker",
    "gateway.cli.commands.bookie",
    "gateway.cli.commands.cluster",
    "gateway.cli.commands.admin",
    "gateway.cli.commands.recover",
    "gateway.cli.commands.ledgers",
    "gateway.cli.commands.autorecovery",
    "gateway.cli.commands.backfill",
    "gateway.cli.commands.replay",
]
