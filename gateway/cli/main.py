"""The `ledgerwire` command: parses arguments and hands over to one subcommand module.

Subcommands live in gateway/cli/commands/ (listed in COMMAND_MODULES); this module holds no
server logic of its own.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from gateway.cli.commands import COMMAND_MODULES
from gateway.config.settings import ConfigError
from ledger_backend.metadata.store import MetadataError


def _commands(argv: list[str] | None = None) -> list[ModuleType]:
    """The command modules; only the one `argv` names when it names one (each module is named
    after its command), so `ledgerwire standalone` does not import Spark's (~1 s of CPU at
    every start)."""
    named = [m for m in COMMAND_MODULES if argv and m.rsplit(".", 1)[1] == argv[0]]
    return [importlib.import_module(name) for name in named or COMMAND_MODULES]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgerwire",
        description="Kafka- and RocketMQ-compatible broker on a replicated ledger store",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in _commands(argv):
        sub = subparsers.add_parser(module.NAME, help=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(command_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    try:
        return int(args.command_module.run(args) or 0)
    except ConfigError as exc:
        print(f"ledgerwire: {exc}", file=sys.stderr)
        return 2
    except MetadataError as exc:  # e.g. ZooKeeper refused this identity: one line, no trace
        print(f"ledgerwire: metadata store: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
