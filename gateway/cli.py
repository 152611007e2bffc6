"""The `ledgerwire` command.

    ledgerwire standalone [--config FILE] [flags]   broker + bookies + embedded metadata

Flags override the TOML file, which overrides the defaults (see gateway/config.py).
This module parses arguments and hands over to the process's main coroutine; it holds no
server logic of its own.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import trio

from gateway.config import Config, ConfigError, load_config
from gateway.logging_setup import setup_logging


def _bool_flag(parser: argparse.ArgumentParser, name: str, dest: str, help_text: str) -> None:
    parser.add_argument(f"--{name}", dest=dest, action="store_true", default=None, help=help_text)
    parser.add_argument(f"--no-{name}", dest=dest, action="store_false", default=None)


def _add_standalone_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML configuration file")
    p.add_argument("--data-dir", dest="data_dir", help="data directory (default ./data)")
    p.add_argument("--kafka-listener", dest="kafka.listener", help="host:port (default :9092)")
    p.add_argument("--advertised-host", dest="kafka.advertised_host")
    p.add_argument("--advertised-port", dest="kafka.advertised_port", type=int)
    p.add_argument("--bookies", dest="storage.bookies", type=int, help="in-process bookies")
    p.add_argument("--bookie-port", dest="storage.bookie_port", type=int,
                   help="first bookie's port (the others follow)")
    p.add_argument("--ensemble-size", dest="storage.ensemble_size", type=int)
    p.add_argument("--write-quorum", dest="storage.write_quorum", type=int)
    p.add_argument("--ack-quorum", dest="storage.ack_quorum", type=int)
    _bool_flag(p, "fsync", "storage.fsync", "fsync the journal before acknowledging (default)")
    _bool_flag(p, "auto-create-topics", "kafka.auto_create_topics", "create topics on first use")
    p.add_argument("--default-partitions", dest="kafka.default_partitions", type=int)
    p.add_argument("--retention-ms", dest="retention.retention_ms", type=int)
    p.add_argument("--retention-bytes", dest="retention.retention_bytes", type=int)
    p.add_argument("--log-level", dest="log.level")
    p.add_argument("--log-format", dest="log.format", choices=["json", "text"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgerwire",
        description="Kafka-compatible broker on a replicated ledger store",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser(
        "standalone", help="broker, bookies and embedded metadata in one process"
    )
    _add_standalone_flags(standalone)
    return parser


def _config_from_args(args: argparse.Namespace) -> Config:
    overrides = {
        key: value
        for key, value in vars(args).items()
        if key not in ("command", "config") and value is not None
    }
    return load_config(args.config, overrides)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = _config_from_args(args)
    except ConfigError as exc:
        print(f"ledgerwire: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log.level, config.log.format)
    if args.command == "standalone":
        from gateway.standalone import run_standalone

        try:
            trio.run(run_standalone, config)
        except KeyboardInterrupt:
            pass
        except OSError as exc:
            logging.getLogger("ledgerwire").error("cannot start: %s", exc)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
