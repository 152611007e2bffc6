"""The `ledgerwire` subcommands, one module each.

A command module defines NAME, HELP, `add_arguments(parser)` and `run(args) -> int`.
To add a command, write its module and list it in COMMAND_MODULES; nothing else changes.
"""

from __future__ import annotations

COMMAND_MODULES: list[str] = [
    "gateway.commands.standalone",
    "gateway.commands.users",
    "gateway.commands.broker",
    "gateway.commands.bookie",
    "gateway.commands.cluster",
    "gateway.commands.admin",
    "gateway.commands.recover",
    "gateway.commands.ledgers",
    "gateway.commands.autorecovery",
    "gateway.commands.backfill",
    "gateway.commands.replay",
]
